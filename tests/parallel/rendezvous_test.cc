// The NCCL backend's point-to-point handshake, without a GPU: messages
// round-trip, sends and receives of one tag match oldest first whichever side
// comes first, mismatches are named on both sides, and — simulated over FIFO
// host channels with random timing — both ends launch the same transfers in
// the same order, each pairing the right send with the right receive.
#include "parallel/comm/rendezvous.h"

#include <gtest/gtest.h>

#include <random>

#include "tensor/creation.h"
#include "tests/test_util.h"

namespace loom::parallel::rendezvous {
namespace {

OpPtr p2p(OpKind kind, int tag, int64_t numel = 4, DType dtype = kFloat32, int seq = 1) {
  auto op = std::make_shared<Op>(kind);
  op->input = op->output = zeros({numel}, {.dtype = dtype});
  op->tag = tag;
  op->peer = kind == OpKind::Send ? 1 : 0;
  op->rank = kind == OpKind::Send ? 0 : 1;
  op->seq = seq;
  return op;
}

TEST(RendezvousTest, MessagesRoundTrip) {
  Message request{Message::kRequest, {7, 12, 3, 1000}, {}, false, ""};
  Message back = decode(encode(request).data(), kMessageBytes, 1);
  EXPECT_EQ(back.kind, Message::kRequest);
  EXPECT_EQ(back.request.id, 7);
  EXPECT_EQ(back.request.tag, 12);
  EXPECT_EQ(back.request.numel, 1000);
  EXPECT_FALSE(back.has_channel_id);
  Message reply{Message::kReply, {}, {7, true, 3, 1000}, true, std::string(kIdBytes, 'x')};
  back = decode(encode(reply).data(), kMessageBytes, 1);
  EXPECT_EQ(back.kind, Message::kReply);
  EXPECT_TRUE(back.reply.ok);
  EXPECT_EQ(back.channel_id, std::string(kIdBytes, 'x'));
  std::vector<uint8_t> bad = encode(request);
  bad[0] = 9;
  EXPECT_THROW_MSG(decode(bad.data(), bad.size(), 3), "rank 3 sent a handshake of unknown kind 9");
  EXPECT_THROW_MSG(decode(bad.data(), 10, 3), "has 10 bytes");
}

TEST(RendezvousTest, OldestOfATagMatchesWhicheverSideComesFirst) {
  SendMatcher s;
  OpPtr a = p2p(OpKind::Send, 5), b = p2p(OpKind::Send, 5), c = p2p(OpKind::Send, 6);
  s.add_send(a);
  s.add_send(b);
  s.add_send(c);
  EXPECT_TRUE(s.take_matches().empty());
  s.add_request({1, 6, static_cast<int64_t>(kFloat32), 4});  // tag 6 first: c
  s.add_request({2, 5, static_cast<int64_t>(kFloat32), 4});  // then the oldest tag-5 send: a
  s.add_request({3, 7, static_cast<int64_t>(kFloat32), 4});  // no tag-7 send yet: waits
  auto matches = s.take_matches();
  ASSERT_EQ(matches.size(), 2u);
  EXPECT_EQ(matches[0].send, c);
  EXPECT_EQ(matches[0].request.id, 1);
  EXPECT_EQ(matches[1].send, a);
  EXPECT_EQ(s.unmatched().size(), 1u);
  OpPtr d = p2p(OpKind::Send, 7);
  s.add_send(d);  // meets the waiting request
  matches = s.take_matches();
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].send, d);
  EXPECT_TRUE(matches[0].ok);
}

TEST(RendezvousTest, MismatchesAreNamedOnBothSides) {
  SendMatcher s;
  OpPtr send = p2p(OpKind::Send, 9, 5);
  s.add_send(send);
  s.add_request({1, 9, static_cast<int64_t>(kFloat32), 4});
  auto matches = s.take_matches();
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_FALSE(matches[0].ok);
  EXPECT_EQ(send_mismatch(*send, matches[0].request),
            "rank 0: send #1 to rank 1 (tag 9, 5 x float32): rank 1 receives 4 x float32, but this send has 5 x float32");
  RecvMatcher r;
  OpPtr recv = p2p(OpKind::Recv, 9, 4);
  const Request request = r.add_recv(recv);
  EXPECT_EQ(request.numel, 4);
  EXPECT_EQ(r.take({request.id, false, static_cast<int64_t>(kFloat32), 5}, 0), recv);
  EXPECT_EQ(recv_mismatch(*recv, {request.id, false, static_cast<int64_t>(kFloat32), 5}),
            "rank 1: recv #1 from rank 0 (tag 9, 4 x float32): rank 0 sent 5 x float32, but this recv expects 4 x float32");
  EXPECT_THROW_MSG(r.take({99, true, 0, 0}, 0), "rank 0 answered request 99, which no receive is waiting for");
}

// Sender 0 and receiver 1 issue the same messages (several tags) in
// different random orders; host messages arrive in order after random delays.
TEST(RendezvousTest, BothEndsLaunchTheSameTransfersInTheSameOrder) {
  for (int trial = 0; trial < 200; ++trial) {
    std::mt19937 rng(trial);
    // Message k: tag k % 3, numel k + 1; each side issues them in its own order,
    // but within one tag in the same order (as ProcessGroup requires).
    const int count = 12;
    auto order = [&] {
      std::vector<int> by_tag[3];
      for (int k = 0; k < count; ++k) by_tag[k % 3].push_back(k);
      std::vector<int> out;
      size_t next[3] = {0, 0, 0};
      while (out.size() < count) {
        const int t = rng() % 3;
        if (next[t] < by_tag[t].size()) out.push_back(by_tag[t][next[t]++]);
      }
      return out;
    };
    const std::vector<int> send_order = order(), recv_order = order();
    SendMatcher sender;
    RecvMatcher receiver;
    std::deque<Message> to_sender, to_receiver;  // FIFO host channels
    std::vector<int64_t> launched_by_sender, launched_by_receiver;  // message numbers (numel - 1)
    size_t s = 0, r = 0;
    while (launched_by_receiver.size() < count) {
      switch (rng() % 4) {
        case 0:
          if (s < send_order.size()) sender.add_send(p2p(OpKind::Send, send_order[s] % 3, send_order[s] + 1)), ++s;
          break;
        case 1:
          if (r < recv_order.size()) {
            Message m;
            m.request = receiver.add_recv(p2p(OpKind::Recv, recv_order[r] % 3, recv_order[r] + 1));
            to_sender.push_back(m);
            ++r;
          }
          break;
        case 2:
          if (!to_sender.empty()) sender.add_request(to_sender.front().request), to_sender.pop_front();
          break;
        case 3:
          if (!to_receiver.empty()) {
            OpPtr recv = receiver.take(to_receiver.front().reply, 0);
            ASSERT_TRUE(to_receiver.front().reply.ok);
            launched_by_receiver.push_back(recv->output.numel() - 1);
            to_receiver.pop_front();
          }
          break;
      }
      for (const SendMatcher::Match& match : sender.take_matches()) {
        ASSERT_TRUE(match.ok) << "trial " << trial;
        launched_by_sender.push_back(match.send->input.numel() - 1);
        Message m;
        m.kind = Message::kReply;
        m.reply = {match.request.id, match.ok, match.request.dtype, match.send->input.numel()};
        to_receiver.push_back(m);
      }
    }
    EXPECT_EQ(launched_by_sender, launched_by_receiver) << "trial " << trial;
  }
}

}  // namespace
}  // namespace loom::parallel::rendezvous
