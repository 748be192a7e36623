#include "parallel/ddp/distributed_data_parallel.h"

#include <sstream>

#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {
namespace {

// A rank's parameters as numbers every rank can compare:
// [count, then per parameter: dtype, ndim, dims...].
std::vector<int64_t> parameter_signature(const TensorList& params) {
  std::vector<int64_t> s{static_cast<int64_t>(params.size())};
  for (const Tensor& p : params) {
    s.push_back(static_cast<int64_t>(p.dtype()));
    s.push_back(p.dim());
    for (int64_t d : p.shape()) s.push_back(d);
  }
  return s;
}

// "[4, 5] float32" for parameter `index` of a signature, or "" if it has none.
std::string describe(const std::vector<int64_t>& s, int64_t index) {
  size_t at = 1;
  for (int64_t k = 0; k < s[0]; ++k) {
    const auto dtype = static_cast<DType>(s[at]);
    const int64_t ndim = s[at + 1];
    if (k == index) {
      std::ostringstream out;
      out << Shape(std::vector<int64_t>(s.begin() + at + 2, s.begin() + at + 2 + ndim)) << " " << dtype;
      return out.str();
    }
    at += 2 + ndim;
  }
  return "";
}

}  // namespace

DistributedDataParallelImpl::DistributedDataParallelImpl(nn::ModulePtr module, std::shared_ptr<ProcessGroup> group,
                                                         DDPOptions options)
    : Module("DistributedDataParallel"), module_(std::move(module)), group_(std::move(group)), options_(options) {
  LOOM_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  LOOM_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  register_module("module", module_);

  TensorList params;
  std::vector<std::string> names;
  for (auto& [name, p] : module_->named_parameters())
    if (p.requires_grad()) {
      params.push_back(p);
      names.push_back(name);
    }
  LOOM_CHECK(!params.empty(), "DistributedDataParallel: the module has no parameter that requires grad");

  check_same_parameters_on_all_ranks();
  // Kept: forward broadcasts them every step, and collecting them walks the
  // module tree. Module::to keeps tensors' identity (set_data), so the list stays valid.
  buffers_ = module_->buffers();
  broadcast_from_rank0(module_->parameters());
  broadcast_from_rank0(buffers_);
  reducer_ = Reducer::create(std::move(params), std::move(names), group_,
                             {.bucket_cap_bytes = options_.bucket_cap_bytes,
                              .find_unused_parameters = options_.find_unused_parameters,
                              .gradient_as_bucket_view = options_.gradient_as_bucket_view});
}

void DistributedDataParallelImpl::check_same_parameters_on_all_ranks() {
  const TensorList params = module_->parameters();
  const std::vector<int64_t> mine = parameter_signature(params);
  const int world = group_->size();

  // Two all_gathers: the signatures' lengths, then the signatures.
  Tensor my_length = full({1}, static_cast<double>(mine.size()), {.dtype = kInt64});
  std::vector<Tensor> lengths;
  for (int r = 0; r < world; ++r) lengths.push_back(empty({1}, {.dtype = kInt64}));
  group_->all_gather(lengths, my_length)->wait();
  Tensor my_signature = from_vector(mine);
  std::vector<Tensor> signatures;
  for (int r = 0; r < world; ++r) signatures.push_back(empty({lengths[r].item<int64_t>()}, {.dtype = kInt64}));
  group_->all_gather(signatures, my_signature)->wait();

  const std::vector<int64_t> reference = signatures[0].to_vector<int64_t>();
  const auto named = module_->named_parameters();
  for (int r = 1; r < world; ++r) {
    const std::vector<int64_t> theirs = signatures[r].to_vector<int64_t>();
    LOOM_CHECK(theirs[0] == reference[0], "DistributedDataParallel: rank ", r, " has ", theirs[0],
               " parameters but rank 0 has ", reference[0], ": every rank must build the same model");
    for (int64_t k = 0; k < reference[0]; ++k) {
      const std::string a = describe(reference, k), b = describe(theirs, k);
      LOOM_CHECK(a == b, "DistributedDataParallel: parameter ", k, " ('", named[k].first, "' here) is ", b,
                 " on rank ", r, " but ", a, " on rank 0: every rank must build the same model");
    }
  }
}

void DistributedDataParallelImpl::broadcast_from_rank0(const TensorList& tensors) {
  if (group_->size() == 1 || tensors.empty()) return;
  NoGradGuard no_grad;
  // A group finishes its operations in order: the last one done means all are.
  WorkPtr last;
  for (const Tensor& t : tensors) last = group_->broadcast(t.detach(), 0);
  last->wait();
}

Tensor DistributedDataParallelImpl::forward(const Tensor& x) {
  if (options_.broadcast_buffers) broadcast_from_rank0(buffers_);
  reducer_->prepare_for_backward(sync_ && autograd::grad_enabled());
  return module_->forward(x);
}

}  // namespace loom::parallel
