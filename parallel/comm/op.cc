#include "parallel/comm/op.h"

#include "tensor/error.h"

namespace loom::parallel {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::Barrier: return "barrier";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
  }
  return "unknown";
}

int64_t Op::payload_bytes() const {
  switch (kind) {
    case OpKind::AllGather: return static_cast<int64_t>(output.nbytes());
    case OpKind::Barrier: return 0;
    default: return static_cast<int64_t>(input.nbytes());
  }
}

int64_t Op::bus_bytes() const {
  const int64_t n = group_size;
  switch (kind) {
    case OpKind::AllReduce: return payload_bytes() * 2 * (n - 1) / n;
    case OpKind::AllGather:
    case OpKind::ReduceScatter: return payload_bytes() * (n - 1) / n;
    default: return payload_bytes();
  }
}

std::string Op::describe() const {
  auto elements = [](const Tensor& t) { return detail::concat(t.numel(), " x ", t.dtype()); };
  std::string name = detail::concat(op_kind_name(kind), " #", seq);
  switch (kind) {
    case OpKind::AllReduce:
      return detail::concat(name, " (", reduce_op_name(reduce), ", ", elements(input), ")");
    case OpKind::Broadcast:
      return detail::concat(name, " (root ", peer, ", ", elements(input), ")");
    case OpKind::AllGather:
      return detail::concat(name, " (", elements(input), " in, ", elements(output), " out)");
    case OpKind::ReduceScatter:
      return detail::concat(name, " (", reduce_op_name(reduce), ", ", elements(input), " in, ",
                            elements(output), " out)");
    case OpKind::Barrier: return name;
    case OpKind::Send:
      return detail::concat(name, " to rank ", peer, " (tag ", tag, ", ", elements(input), ")");
    case OpKind::Recv:
      return detail::concat(name, " from rank ", peer, " (tag ", tag, ", ", elements(input), ")");
  }
  return name;
}

std::string seconds_text(std::chrono::milliseconds duration) {
  return detail::concat(duration.count() / 1000.0, " s");
}

std::string Op::where() const { return detail::concat("rank ", rank, ": ", describe()); }

}  // namespace loom::parallel
