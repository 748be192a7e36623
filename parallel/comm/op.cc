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
    case OpKind::AllGather: return output_numel() * static_cast<int64_t>(element_size(dtype()));
    case OpKind::Barrier: return 0;
    default: return input_numel() * static_cast<int64_t>(element_size(dtype()));
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
  auto elements = [this](int64_t numel) { return detail::concat(numel, " x ", dtype()); };
  std::string name = detail::concat(op_kind_name(kind), " #", seq);
  switch (kind) {
    case OpKind::AllReduce:
      return detail::concat(name, " (", reduce_op_name(reduce), ", ", elements(input_numel()), ")");
    case OpKind::Broadcast:
      return detail::concat(name, " (root ", peer, ", ", elements(input_numel()), ")");
    case OpKind::AllGather:
      return detail::concat(name, " (", elements(input_numel()), " in, ", elements(output_numel()), " out)");
    case OpKind::ReduceScatter:
      return detail::concat(name, " (", reduce_op_name(reduce), ", ", elements(input_numel()), " in, ",
                            elements(output_numel()), " out)");
    case OpKind::Barrier: return name;
    case OpKind::Send:
      return detail::concat(name, " to rank ", peer, " (tag ", tag, ", ", elements(input_numel()), ")");
    case OpKind::Recv:
      return detail::concat(name, " from rank ", peer, " (tag ", tag, ", ", elements(input_numel()), ")");
  }
  return name;
}

std::string seconds_text(std::chrono::milliseconds duration) {
  return detail::concat(duration.count() / 1000.0, " s");
}

void Op::release_tensors() {
  released_ = {dtype(), input_numel(), output_numel()};
  input = Tensor();
  output = Tensor();
  outputs.clear();
}

std::string Op::where() const { return detail::concat("rank ", rank, ": ", describe()); }

}  // namespace loom::parallel
