#include "parallel/comm/rendezvous.h"

#include <cstring>

#include "tensor/error.h"

namespace loom::parallel::rendezvous {
namespace {

std::string elements(int64_t numel, int64_t dtype) {
  return detail::concat(numel, " x ", dtype_name(static_cast<DType>(dtype)));
}

bool agree(const Op& send, const Request& request) {
  return request.dtype == static_cast<int64_t>(send.input.dtype()) && request.numel == send.input.numel();
}

}  // namespace

std::vector<uint8_t> encode(const Message& m) {
  int64_t words[8] = {};
  words[0] = m.kind;
  if (m.kind == Message::kRequest) {
    words[1] = m.request.id;
    words[2] = m.request.tag;
    words[3] = m.request.dtype;
    words[4] = m.request.numel;
  } else {
    words[1] = m.reply.id;
    words[2] = m.reply.ok;
    words[3] = m.reply.dtype;
    words[4] = m.reply.numel;
  }
  words[5] = m.has_channel_id;
  std::vector<uint8_t> out(kMessageBytes, 0);
  std::memcpy(out.data(), words, sizeof(words));
  if (m.has_channel_id) {
    LOOM_INTERNAL_ASSERT(m.channel_id.size() == kIdBytes, "a channel id has ", kIdBytes, " bytes");
    std::memcpy(out.data() + sizeof(words), m.channel_id.data(), kIdBytes);
  }
  return out;
}

Message decode(const uint8_t* bytes, size_t size, int peer) {
  LOOM_CHECK(size == kMessageBytes, "nccl backend: a handshake from rank ", peer, " has ", size, " bytes, not ",
             kMessageBytes);
  int64_t words[8];
  std::memcpy(words, bytes, sizeof(words));
  Message m;
  LOOM_CHECK((words[0] == Message::kRequest || words[0] == Message::kReply) && (words[5] == 0 || words[5] == 1),
             "nccl backend: rank ", peer, " sent a handshake of unknown kind ", words[0]);
  m.kind = static_cast<Message::Kind>(words[0]);
  if (m.kind == Message::kRequest) {
    m.request = {words[1], words[2], words[3], words[4]};
  } else {
    m.reply = {words[1], words[2] != 0, words[3], words[4]};
  }
  m.has_channel_id = words[5] == 1;
  if (m.has_channel_id) m.channel_id.assign(reinterpret_cast<const char*>(bytes) + sizeof(words), kIdBytes);
  return m;
}

void SendMatcher::add_send(OpPtr send) {
  for (auto it = requests_.begin(); it != requests_.end(); ++it) {
    if (it->tag != send->tag) continue;
    const Request request = *it;
    requests_.erase(it);
    match(std::move(send), request);
    return;
  }
  sends_.push_back(std::move(send));
}

void SendMatcher::add_request(const Request& request) {
  for (auto it = sends_.begin(); it != sends_.end(); ++it) {
    if ((*it)->tag != request.tag) continue;
    OpPtr send = *it;
    sends_.erase(it);
    match(std::move(send), request);
    return;
  }
  requests_.push_back(request);
}

void SendMatcher::match(OpPtr send, const Request& request) {
  const bool ok = agree(*send, request);
  matches_.push_back({std::move(send), request, ok});
}

std::vector<SendMatcher::Match> SendMatcher::take_matches() {
  std::vector<Match> out;
  out.swap(matches_);
  return out;
}

Request RecvMatcher::add_recv(OpPtr recv) {
  const Request request{next_id_++, recv->tag, static_cast<int64_t>(recv->output.dtype()), recv->output.numel()};
  recvs_.emplace(request.id, std::move(recv));
  return request;
}

OpPtr RecvMatcher::take(const Reply& reply, int peer) {
  auto it = recvs_.find(reply.id);
  LOOM_CHECK(it != recvs_.end(), "nccl backend: rank ", peer, " answered request ", reply.id,
             ", which no receive is waiting for");
  OpPtr recv = it->second;
  recvs_.erase(it);
  return recv;
}

std::string recv_mismatch(const Op& recv, const Reply& reply) {
  return detail::concat(recv.where(), ": rank ", recv.peer, " sent ", elements(reply.numel, reply.dtype),
                        ", but this recv expects ", recv.output.numel(), " x ", recv.output.dtype());
}

std::string send_mismatch(const Op& send, const Request& request) {
  return detail::concat(send.where(), ": rank ", send.peer, " receives ", elements(request.numel, request.dtype),
                        ", but this send has ", send.input.numel(), " x ", send.input.dtype());
}

}  // namespace loom::parallel::rendezvous
