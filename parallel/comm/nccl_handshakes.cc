// NcclGroup's point-to-point handshakes (rendezvous.h): sends and recvs are
// matched over the bootstrap group before their transfers are queued.
#include "parallel/comm/nccl_group_state.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "parallel/comm/descriptor.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"

namespace loom::parallel {

using namespace nccl;

void NcclGroup::State::send_handshake(int peer, const rendezvous::Message& message) {
  const std::vector<uint8_t> bytes = rendezvous::encode(message);
  Tensor t = from_vector<uint8_t>(bytes, {static_cast<int64_t>(bytes.size())}, {.dtype = kUInt8});
  handshakes_sent.push_back(bootstrap->send(t, peer, kHandshakeTag));
}

bool NcclGroup::State::advance_handshakes() {
  bool progress = false;
  const Clock::time_point now = Clock::now();
  // Matched sends: answer the receiver, and queue the transfer on the channel.
  for (int p = 0; p < size; ++p) {
    for (rendezvous::SendMatcher::Match& m : sends[p].take_matches()) {
      progress = true;
      Op& op = *m.send;
      rendezvous::Message reply;
      reply.kind = rendezvous::Message::kReply;
      reply.reply = {m.request.id, m.ok, static_cast<int64_t>(op.input.dtype()), op.input.numel()};
      auto ready = p2p_ready[&op];
      handshake_deadlines.erase(&op);
      p2p_ready.erase(&op);
      if (!m.ok) {
        send_handshake(p, reply);
        finish(op, error_of(rendezvous::send_mismatch(op, m.request)));
        continue;
      }
      Lane& lane = to[p];
      if (!lane.comm) {  // the channel's first message: its sender makes the communicator
        reply.has_channel_id = true;
        reply.channel_id = NcclComm::new_id();
        lane.comm = std::make_unique<NcclComm>(reply.channel_id, 2, 0);
      }
      send_handshake(p, reply);
      auto t = std::make_shared<Transfer>();
      t->op = m.send;
      t->ready = std::move(ready);
      const Tensor in = op.input;
      const std::string what = op.where();
      t->launch = [in, what](NcclComm& c, cudaStream_t s) {
        if (in.numel() > 0) c.call(ncclSend(address(in), in.numel(), nccl_type(in.dtype()), 1, c.get(), s), what);
      };
      queue_transfer(lane, std::move(t));
    }
  }
  // Listen to a peer while a send waits for its request or a recv for its reply.
  for (int p = 0; p < size; ++p) {
    auto& [buffer, work] = listening[p];
    if (work && work->is_completed()) {
      const WorkPtr done = std::move(work);  // cleared first, so that a failure is reported once
      done->wait();  // a broken bootstrap group fails this one (run())
      const rendezvous::Message m = rendezvous::decode(buffer.data_ptr<uint8_t>(), buffer.numel(), p);
      progress = true;
      if (m.kind == rendezvous::Message::kRequest) {
        sends[p].add_request(m.request);
      } else {
        OpPtr op = recvs[p].take(m.reply, p);
        auto ready = p2p_ready[op.get()];
        handshake_deadlines.erase(op.get());
        p2p_ready.erase(op.get());
        if (!m.reply.ok) {
          finish(*op, error_of(rendezvous::recv_mismatch(*op, m.reply)));
        } else {
          Lane& lane = from[p];
          if (m.has_channel_id) {
            LOOM_CHECK(!lane.comm, "nccl backend: rank ", p, " opened its channel to rank ", rank, " twice");
            lane.comm = std::make_unique<NcclComm>(m.channel_id, 2, 1);
          }
          LOOM_CHECK(lane.comm, "nccl backend: rank ", p, " sent before opening its channel");
          auto t = std::make_shared<Transfer>();
          t->op = op;
          t->ready = std::move(ready);
          const Tensor out = op->output;
          const std::string what = op->where();
          t->launch = [out, what](NcclComm& c, cudaStream_t s) {
            if (out.numel() > 0)
              c.call(ncclRecv(address(out), out.numel(), nccl_type(out.dtype()), 0, c.get(), s), what);
          };
          queue_transfer(lane, std::move(t));
        }
      }
    }
    if (!work && (!sends[p].unmatched().empty() || recvs[p].waiting())) {
      buffer = empty({rendezvous::kMessageBytes}, {.dtype = kUInt8});
      work = bootstrap->recv(buffer, p, kHandshakeTag);
    }
  }
  // A send that never learns of its recv, or the reverse, times out.
  for (const auto& [op, deadline] : handshake_deadlines)
    if (now > deadline)
      throw Error(detail::concat(op->where(), ": did not complete within ", seconds_text(timeout), " (rank ", op->peer,
                                 " never posted the matching ", op->kind == OpKind::Send ? "recv" : "send",
                                 "); a peer may have died, be stuck, or be waiting in a different operation"));
  // Handshakes and CPU point-to-point operations on the bootstrap group.
  for (auto it = handshakes_sent.begin(); it != handshakes_sent.end();) {
    if (!(*it)->is_completed()) {
      ++it;
      continue;
    }
    const WorkPtr sent = *it;
    it = handshakes_sent.erase(it);  // first, so that a failure is reported once
    sent->wait();
  }
  for (auto it = forwarded_p2p.begin(); it != forwarded_p2p.end();) {
    if (!it->second->is_completed()) {
      ++it;
      continue;
    }
    std::exception_ptr error;
    try {
      it->second->wait();
    } catch (...) {
      error = std::current_exception();
    }
    finish(*it->first, error);
    it = forwarded_p2p.erase(it);
    progress = true;
  }
  return progress;
}


}  // namespace loom::parallel
