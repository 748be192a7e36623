#include "autograd/node.h"

#include "tensor/backend.h"
#include "tensor/creation.h"

namespace loom::autograd {
namespace {

thread_local bool t_grad_enabled = true;
thread_local uint64_t t_tape_position = 0;

}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
uint64_t next_sequence_nr() { return t_tape_position++; }

TensorList FunctionNode::apply_selected(TensorList&& grad_outputs, const InputMask& wanted) {
  LOOM_CHECK(backward_ != nullptr || selective_backward_ != nullptr, name_,
             ": trying to backward through the graph a second time (its saved tensors were "
             "freed by the first backward); pass retain_graph=true to the first backward if you "
             "need to run it twice");
  return backward_ ? backward_(grad_outputs) : selective_backward_(grad_outputs, wanted);
}

// The highest sequence number: the engine runs the newest node first, so a
// leaf's gradient is accumulated (and its hooks fire, which DDP's buckets wait
// for) as soon as every gradient flowing into it is in, ahead of older nodes.
AccumulateGrad::AccumulateGrad(Tensor leaf)
    : Node({}, UINT64_MAX), leaf_(std::move(leaf)) {
  add_output(leaf_);
}

namespace {

// Adds `incoming` into leaf.grad(); the caller holds meta.mutex.
void accumulate_locked(const Tensor& leaf, AutogradMeta& meta, const Tensor& incoming) {
  // The engine checks gradients against the leaf as the forward saw it; a
  // leaf moved or converted since (Module::to) would otherwise have a
  // kernel add memory of another device or dtype into its .grad().
  LOOM_CHECK(incoming.shape() == leaf.shape() && incoming.dtype() == leaf.dtype() &&
                 incoming.device() == leaf.device(),
             "accumulate_grad: gradient ", incoming.shape(), " ", incoming.dtype(), " on ", incoming.device(),
             " does not match the tensor ", leaf.shape(), " ", leaf.dtype(), " on ", leaf.device(),
             " (was it moved or converted between the forward and this backward?)");
  if (!meta.grad.defined()) {
    // Keep the incoming gradient only if nothing else can see it: no other
    // handle (a backward that returns one gradient for two inputs, as
    // AddBackward does, sends the same tensor to both leaves; a caller's
    // grad_output) and no other view of its memory. Otherwise an in-place
    // update of .grad() (the next accumulation, clipping, unscaling) would
    // change another tensor too.
    const bool exclusive = incoming.use_count() == 1 && incoming.is_contiguous() &&
                           incoming.storage().use_count() == 1 && incoming.storage_offset() == 0;
    meta.grad = exclusive ? incoming : contiguous_copy(incoming);
  } else {
    backend_for(meta.grad.device()).binary(BinaryOp::Add, meta.grad, incoming, meta.grad, 1.0);
  }
}

}  // namespace

TensorList AccumulateGrad::apply(TensorList&& grad_outputs) {
  AutogradMeta& meta = leaf_.impl()->autograd_meta();
  std::vector<GradHook> hooks;
  {
    std::lock_guard<std::mutex> lock(meta.mutex);
    accumulate_locked(leaf_, meta, grad_outputs[0]);
    hooks = meta.post_accumulate_grad_hooks;
  }
  for (const GradHook& hook : hooks) hook(leaf_);
  return {};
}

void accumulate_grad(const Tensor& leaf, const Tensor& grad) {
  AutogradMeta& meta = leaf.impl()->autograd_meta();
  std::lock_guard<std::mutex> lock(meta.mutex);
  accumulate_locked(leaf, meta, grad);
}

SavedTensor::SavedTensor(const Tensor& t) : data_(t.detach()), version_(t.version()) {}

const Tensor& SavedTensor::get() const {
  LOOM_CHECK(data_.version() == version_,
             "a tensor needed for gradient computation (shape ", data_.shape(), ", ", data_.dtype(),
             ") was modified by an in-place operation after it was saved: saved at version ",
             version_, ", now at version ", data_.version());
  return data_;
}

bool needs_grad(const Tensor& a) { return grad_enabled() && a.defined() && a.requires_grad(); }
bool needs_grad(const Tensor& a, const Tensor& b) {
  return grad_enabled() && ((a.defined() && a.requires_grad()) || (b.defined() && b.requires_grad()));
}
bool needs_grad(const TensorList& tensors) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : tensors)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (!t.is_leaf()) return {t.grad_fn(), t.output_nr()};
  AutogradMeta& meta = t.impl()->autograd_meta();
  std::lock_guard<std::mutex> lock(meta.mutex);
  std::shared_ptr<Node> accumulator = meta.grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

namespace {

template <typename Backward>
void record_node(const char* name, const TensorList& inputs, const TensorList& outputs, Backward backward) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& input : inputs) edges.push_back(gradient_edge(input));
  auto node = std::make_shared<FunctionNode>(name, std::move(edges), std::move(backward));
  for (size_t i = 0; i < outputs.size(); ++i) {
    node->add_output(outputs[i]);
    AutogradMeta& meta = outputs[i].impl()->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

}  // namespace

void record(const char* name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward) {
  record_node(name, inputs, outputs, std::move(backward));
}

void record_selective(const char* name, const TensorList& inputs, const TensorList& outputs,
                      SelectiveBackwardFn backward) {
  record_node(name, inputs, outputs, std::move(backward));
}

}  // namespace loom::autograd
