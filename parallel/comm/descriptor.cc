#include "parallel/comm/descriptor.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "tensor/error.h"
#include "tensor/fnv1a.h"

namespace loom::parallel {

int64_t offset_inside(const Tensor& piece, const Tensor& whole) {
  if (piece.storage() != whole.storage() || piece.numel() == 0 || whole.numel() == 0) return -1;
  const auto bytes = static_cast<const char*>(piece.raw_data()) - static_cast<const char*>(whole.raw_data());
  if (bytes < 0 || bytes + static_cast<int64_t>(piece.nbytes()) > static_cast<int64_t>(whole.nbytes())) return -1;
  return bytes / static_cast<int64_t>(whole.element_size());
}

Descriptor make_descriptor(const Op& op) {
  Descriptor d;
  d.kind = static_cast<int64_t>(op.kind);
  d.seq = op.seq;
  if (op.kind == OpKind::Barrier) return d;
  d.dtype = static_cast<int64_t>(op.input.dtype());
  d.numel = op.input.numel();
  switch (op.kind) {
    case OpKind::AllReduce: d.arg = static_cast<int64_t>(op.reduce); break;
    case OpKind::Broadcast: d.arg = op.peer; break;
    case OpKind::AllGather:
      d.out_numel = op.output.numel();
      if (!op.outputs.empty()) {
        std::vector<int64_t> sizes;
        for (const Tensor& t : op.outputs) sizes.push_back(t.numel());
        d.split_hash = hash_sizes(sizes);
      } else {
        d.in_place_at = offset_inside(op.input, op.output);
      }
      break;
    case OpKind::ReduceScatter:
      d.out_numel = op.output.numel();
      d.arg = static_cast<int64_t>(op.reduce);
      d.in_place_at = offset_inside(op.output, op.input);
      break;
    default: break;
  }
  return d;
}

int64_t hash_sizes(const std::vector<int64_t>& sizes) {
  const uint64_t h = fnv1a(sizes.data(), sizes.size() * sizeof(int64_t));
  return h == 0 ? 1 : static_cast<int64_t>(h);
}

std::vector<int64_t> split_counts(const std::vector<Descriptor>& all, OpKind kind) {
  std::vector<int64_t> counts;
  for (const Descriptor& d : all) counts.push_back(kind == OpKind::AllGather ? d.numel : d.out_numel);
  return counts;
}

namespace {

// "4 on ranks 0, 2; 5 on rank 1": each distinct value with the ranks that have it.
std::string by_rank(const std::vector<Descriptor>& all,
                    const std::function<std::string(const Descriptor&)>& value) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // in order of first rank
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    std::string v = value(all[r]);
    auto it = std::find_if(groups.begin(), groups.end(), [&](auto& g) { return g.first == v; });
    if (it == groups.end()) groups.push_back({v, {r}});
    else it->second.push_back(r);
  }
  std::ostringstream out;
  for (size_t g = 0; g < groups.size(); ++g) {
    out << (g ? "; " : "") << groups[g].first << " on rank" << (groups[g].second.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < groups[g].second.size(); ++i) out << (i ? ", " : "") << groups[g].second[i];
  }
  return out.str();
}

bool all_equal(const std::vector<Descriptor>& all, int64_t Descriptor::*field) {
  for (const Descriptor& d : all)
    if (d.*field != all[0].*field) return false;
  return true;
}

std::string sizes_text(const std::vector<int64_t>& sizes) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << "]";
  return out.str();
}

// In place, rank r's piece must start where the lower ranks' pieces end.
void check_in_place(const std::string& where, const char* piece, const char* whole,
                    const std::vector<Descriptor>& all, const std::vector<int64_t>& counts) {
  int64_t at = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    LOOM_CHECK(all[r].in_place_at < 0 || all[r].in_place_at == at, where, "in place on rank ", r, ", its ",
               piece, " starts at element ", all[r].in_place_at, " of its ", whole, ", but its piece is elements [",
               at, ", ", at + counts[r], ")");
    at += counts[r];
  }
}

}  // namespace

void check_descriptors(const Op& op, const std::vector<Descriptor>& all) {
  LOOM_INTERNAL_ASSERT(static_cast<int>(all.size()) == op.group_size, "one descriptor per rank");
  const std::string where = op.where() + ": ";

  LOOM_CHECK(all_equal(all, &Descriptor::kind) && all_equal(all, &Descriptor::seq), where,
             "the ranks called different collectives: ", by_rank(all, [](const Descriptor& d) {
               return detail::concat(op_kind_name(static_cast<OpKind>(d.kind)), " #", d.seq);
             }));
  if (op.kind == OpKind::Barrier) return;

  LOOM_CHECK(all_equal(all, &Descriptor::dtype), where, "the ranks disagree on the dtype: ",
             by_rank(all, [](const Descriptor& d) {
               return std::string(dtype_name(static_cast<DType>(d.dtype)));
             }));
  auto numel = [](const Descriptor& d) { return std::to_string(d.numel); };
  auto reduce_op = [](const Descriptor& d) {
    return std::string(reduce_op_name(static_cast<ReduceOp>(d.arg)));
  };

  switch (op.kind) {
    case OpKind::AllReduce:
      LOOM_CHECK(all_equal(all, &Descriptor::numel), where,
                 "the ranks disagree on the number of elements: ", by_rank(all, numel));
      LOOM_CHECK(all_equal(all, &Descriptor::arg), where,
                 "the ranks disagree on the reduce op: ", by_rank(all, reduce_op));
      break;
    case OpKind::Broadcast:
      LOOM_CHECK(all_equal(all, &Descriptor::numel), where,
                 "the ranks disagree on the number of elements: ", by_rank(all, numel));
      LOOM_CHECK(all_equal(all, &Descriptor::arg), where, "the ranks disagree on the root: ",
                 by_rank(all, [](const Descriptor& d) { return std::to_string(d.arg); }));
      break;
    case OpKind::AllGather: {
      std::vector<int64_t> inputs = split_counts(all, OpKind::AllGather);
      int64_t total = 0;
      for (int64_t n : inputs) total += n;
      for (size_t r = 0; r < all.size(); ++r) {
        if (all[r].split_hash != 0)
          LOOM_CHECK(all[r].split_hash == hash_sizes(inputs), where, "the output tensors on rank ",
                     r, " do not match the sizes of the ranks' inputs ", sizes_text(inputs),
                     " (outputs[i] must have as many elements as rank i's input)");
        else
          LOOM_CHECK(all[r].out_numel == total, where, "the output on rank ", r, " has ",
                     all[r].out_numel, " elements, but the ranks' inputs ", sizes_text(inputs),
                     " total ", total);
      }
      check_in_place(where, "input", "output", all, inputs);
      break;
    }
    case OpKind::ReduceScatter: {
      LOOM_CHECK(all_equal(all, &Descriptor::numel), where,
                 "the ranks disagree on the number of input elements: ", by_rank(all, numel));
      LOOM_CHECK(all_equal(all, &Descriptor::arg), where,
                 "the ranks disagree on the reduce op: ", by_rank(all, reduce_op));
      std::vector<int64_t> outputs = split_counts(all, OpKind::ReduceScatter);
      int64_t total = 0;
      for (int64_t n : outputs) total += n;
      LOOM_CHECK(total == all[0].numel, where, "the ranks' outputs ", sizes_text(outputs),
                 " total ", total, " elements, but the input has ", all[0].numel,
                 " (rank i receives the i-th piece of the input, as large as its output)");
      check_in_place(where, "output", "input", all, outputs);
      break;
    }
    default: LOOM_INTERNAL_ASSERT(false, "not a collective: ", op_kind_name(op.kind));
  }
}

}  // namespace loom::parallel
