// Point-to-point matching for a transport that moves a message only once
// both sides have posted it, in the same order on both sides (NCCL: no tags,
// and a send's kernel waits for the matching receive's). ProcessGroup
// promises more — tags, and sends that never wait for their receive to be
// posted — so the NCCL backend agrees on every message over the host first:
//
//   receiver d posts recv(tag, dtype, numel)  -> Request{id, tag, dtype, numel} to s
//   sender s matches each Request with its oldest unmatched send of that tag,
//            whichever of the two came first  -> Reply{id, ok, its dtype, numel} to d
//   both launch the transfer in the order the replies were sent (and received).
//
// Host messages between a pair arrive in order, so the transfers on the
// channel s -> d are launched in the same order on both ends; sends and
// receives of one tag match oldest first; a size or dtype mismatch is an
// error on both sides, and nothing moves. This file is the bookkeeping only
// (plain C++, tested without a GPU); nccl_group.cc moves the messages.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "parallel/comm/op.h"

namespace loom::parallel::rendezvous {

struct Request {
  int64_t id = 0;  // the receiver's number for it, per sender
  int64_t tag = 0, dtype = 0, numel = 0;
};

struct Reply {
  int64_t id = 0;     // the Request it answers
  bool ok = false;    // dtype and numel agree: the transfer follows
  int64_t dtype = 0, numel = 0;  // the sender's
};

// The two kinds share one host channel per pair, as fixed-size messages: a
// header of int64s and, on the first reply of a channel, the NCCL id of the
// channel's communicator.
inline constexpr int kIdBytes = 128;  // sizeof(ncclUniqueId)
inline constexpr int kMessageBytes = 8 * 8 + kIdBytes;
struct Message {
  enum Kind : int64_t { kRequest = 1, kReply = 2 } kind = kRequest;
  Request request;  // kRequest
  Reply reply;      // kReply
  bool has_channel_id = false;
  std::string channel_id;  // kIdBytes bytes when has_channel_id
};
std::vector<uint8_t> encode(const Message& message);
// Throws loom::Error naming `peer` for anything but a message encode() made.
Message decode(const uint8_t* bytes, size_t size, int peer);

// Sender side, one per destination.
class SendMatcher {
 public:
  struct Match {
    OpPtr send;
    Request request;
    bool ok = false;
  };
  void add_send(OpPtr send);
  void add_request(const Request& request);
  // The matches made since the last call, in the order they were made: the
  // order of the replies, and of the transfers.
  std::vector<Match> take_matches();
  // Sends still waiting for their request.
  const std::deque<OpPtr>& unmatched() const { return sends_; }

 private:
  void match(OpPtr send, const Request& request);
  std::deque<OpPtr> sends_;
  std::deque<Request> requests_;
  std::vector<Match> matches_;
};

// Receiver side, one per source.
class RecvMatcher {
 public:
  // Registers a receive and returns the request to send for it.
  Request add_recv(OpPtr recv);
  // The receive a reply answers (removed); throws loom::Error if none waits
  // for it (a peer that breaks the protocol).
  OpPtr take(const Reply& reply, int peer);
  bool waiting() const { return !recvs_.empty(); }
  const std::map<int64_t, OpPtr>& pending() const { return recvs_; }

 private:
  int64_t next_id_ = 1;
  std::map<int64_t, OpPtr> recvs_;
};

// What the receive of a mismatched pair says, and what its send says.
std::string recv_mismatch(const Op& recv, const Reply& reply);
std::string send_mismatch(const Op& send, const Request& request);

}  // namespace loom::parallel::rendezvous
