#include "parallel/planner/model_profile.h"

#include <algorithm>
#include <memory>

#include "autograd/grad_mode.h"
#include "nn/functional.h"
#include "nn/layers/attention.h"
#include "nn/layers/basic.h"
#include "nn/layers/container.h"
#include "nn/layers/linear.h"
#include "optim/optimizer.h"
#include "parallel/pipeline/balance.h"
#include "parallel/sharding/container_units.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/error.h"
#include "tensor/flop_counter.h"
#include "tensor/ops.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {
namespace {

using Loss = std::function<Tensor(const Tensor&, const Tensor&)>;

Loss default_loss() {
  return [](const Tensor& out, const Tensor& target) {
    if (!target.defined()) return out.sum();
    if (is_integral(target.dtype())) return nn::functional::cross_entropy(out.reshape({-1, out.size(-1)}), target.reshape({-1}));
    return nn::functional::mse_loss(out, target);
  };
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name, const TensorList& params, int& state_tensors) {
  if (name == "adamw") {
    state_tensors = 2;
    return std::make_unique<optim::AdamW>(params);
  }
  if (name == "sgd" || name == "sgd-momentum") {
    state_tensors = name == "sgd" ? 0 : 1;
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{.momentum = name == "sgd" ? 0.0 : 0.9});
  }
  LOOM_FAIL("planner: optimizer '", name, "' is none of adamw, sgd, sgd-momentum");
}

Tensor first(const Tensor& t, int64_t n) { return t.defined() ? t.narrow(0, 0, n) : Tensor(); }

// A Sequential of at least two children, which a pipeline can cut; null otherwise.
std::shared_ptr<nn::SequentialImpl> cuttable(const nn::ModulePtr& model) {
  auto sequential = std::dynamic_pointer_cast<nn::SequentialImpl>(model);
  return sequential && sequential->size() >= 2 ? sequential : nullptr;
}

// The peak of a part's backward above what its forward left held, the
// incoming gradient included, at n samples: the temporaries of one
// micro-batch's backward in a pipeline stage.
double backward_peak(nn::Module& part, const Tensor& input, int64_t n, Device device) {
  Tensor x = first(input, n).detach();
  if (is_floating(x.dtype())) x.requires_grad_();
  Tensor y = part.forward(x);
  if (!y.requires_grad()) return 0;
  synchronize(device);
  reset_peak_memory_stats(device);
  const int64_t before = memory_stats(device).allocated_bytes;
  y.backward(ones_like(y));
  synchronize(device);
  return static_cast<double>(memory_stats(device).peak_allocated_bytes - before);
}

// backward_peak's line in the batch. A first pass makes the part's
// parameters' gradients, so that the measured ones add into them, as every
// micro-batch after a step's first does; they are dropped after.
StepMemory backward_bytes(nn::Module& part, const Tensor& input, const MeasuringBatches& at, Device device) {
  backward_peak(part, input, at.small, device);
  const StepMemory line = fit_step_memory(at, [&](int64_t n) { return backward_peak(part, input, n, device); });
  part.zero_grad();
  return line;
}

// Each part's kept bytes, output bytes, forward FLOPs and backward
// temporaries, the forward run with autograd recording, as in training. A
// part's kept bytes are what the allocator holds after it less what it held
// after the part before: what the graph saves and the output, less an input
// nothing saved (a ReLU that keeps its output frees the product before it),
// so a part's figure may be negative; a run of parts (a stage) adds up to
// what it holds. What the part frees of its input is kept apart: a pipeline
// stage that begins with the part keeps its received input all the same.
// The backward's temporaries are measured only for the parts of a pipeline
// (`pipeline`), the only user of them.
void measure_parts(const std::vector<std::pair<std::string, nn::ModulePtr>>& parts, const Tensor& x,
                   const MeasuringBatches& at, Device device, bool pipeline, ModelProfile& p) {
  const int64_t n = at.large;
  Tensor h = first(x, n);
  for (const auto& [name, part] : parts) {
    ModelProfile::Part info;
    info.name = name;
    info.parameters = part->num_parameters();
    if (pipeline) info.backward_bytes = backward_bytes(*part, h, at, device);
    synchronize(device);
    const int64_t held = memory_stats(device).allocated_bytes;
    FlopCounter flops;
    Tensor input = h;
    {
      FlopCounter::Scope scope(flops);
      h = part->forward(h);
    }
    synchronize(device);
    const int64_t with_input = memory_stats(device).allocated_bytes;
    input = Tensor();
    synchronize(device);
    const int64_t now = memory_stats(device).allocated_bytes;
    info.kept_bytes_per_sample = static_cast<double>(now - held) / n;
    info.input_freed_bytes_per_sample = static_cast<double>(with_input - now) / n;
    info.output_bytes_per_sample = static_cast<double>(h.nbytes()) / n;
    info.forward_flops_per_sample = static_cast<double>(flops.total()) / n;
    p.parts.push_back(info);
  }
}

void describe_transformer(const nn::ModulePtr& model, const Tensor& input, ModelProfile& p) {
  for (const auto& [name, module] : model->named_modules()) {
    if (auto* attention = dynamic_cast<nn::CausalSelfAttentionImpl*>(module.get())) {
      ++p.attention_layers;
      p.embed_dim = attention->options.embed_dim;
      p.heads = attention->options.num_heads;
    }
    if (dynamic_cast<nn::LinearImpl*>(module.get()) != nullptr || dynamic_cast<nn::EmbeddingImpl*>(module.get()) != nullptr)
      p.shardable_parameters += module->num_parameters();
  }
  if (p.attention_layers > 0 && input.dim() >= 2) p.tokens_per_sample = input.size(1);
}

}  // namespace

ModelProfile profile_model(const nn::Module& model, const SampleBatch& sample, const ProfileOptions& options) {
  LOOM_CHECK(sample.input.defined() && sample.input.dim() >= 1 && sample.input.size(0) >= 1,
             "planner: the sample batch is empty");
  LOOM_CHECK(!sample.target.defined() || sample.target.size(0) == sample.input.size(0), "planner: the sample's input has ",
             sample.input.size(0), " samples and its target ", sample.target.size(0));
  const Device device = sample.input.device();
  synchronize(device);
  const int64_t outside = memory_stats(device).allocated_bytes;  // the caller's tensors, the model's own included
  const nn::ModulePtr copy = model.clone(device);
  ModelProfile p;
  p.parameters = copy->num_parameters();
  LOOM_CHECK(p.parameters > 0, "planner: the model has no parameters");
  p.element_size = static_cast<int64_t>(copy->parameters().front().element_size());
  const Loss loss = sample.loss ? sample.loss : default_loss();
  auto opt = make_optimizer(options.optimizer, copy->parameters(), p.optimizer_state_tensors);

  // forward, zero_grad, backward, step: the order every strategy's step uses
  // (the previous step's gradients live through the forward).
  auto step = [&](int64_t n) {
    Tensor l = loss(copy->forward(first(sample.input, n)), first(sample.target, n));
    opt->zero_grad();
    l.backward();
    opt->step();
  };
  const int64_t batch = sample.input.size(0);
  const MeasuringBatches at = measuring_batches(batch);
  const int64_t large = at.large;
  step(large);  // gradients and optimizer state exist from here on
  synchronize(device);
  p.state_bytes = memory_stats(device).allocated_bytes - outside;
  auto peak_above_state = [&](int64_t n) {
    synchronize(device);
    reset_peak_memory_stats(device);
    const int64_t before = memory_stats(device).allocated_bytes;
    step(n);
    synchronize(device);
    return static_cast<double>(memory_stats(device).peak_allocated_bytes - before);
  };
  // Only the allocated peak: compare_parallel measures that (the pre-flight
  // check also counts what the caching allocator took from the system).
  p.step_bytes = fit_step_memory(at, peak_above_state);

  FlopCounter flops;
  const Stopwatch watch;
  {
    FlopCounter::Scope scope(flops);
    step(large);
  }
  synchronize(device);
  p.step_seconds_per_sample = watch.seconds() / static_cast<double>(large);
  p.flops_per_sample = static_cast<double>(flops.total()) / static_cast<double>(large);

  opt->zero_grad();
  if (const auto sequential = cuttable(copy)) {
    measure_parts(sequential->named_children(), sample.input, at, device, /*pipeline=*/true, p);
    // A pipeline is cut where the children's measured times balance, as compare_parallel cuts it.
    const std::vector<double> seconds = time_children(nn::Sequential(sequential), sample.input).seconds();
    for (size_t i = 0; i < p.parts.size(); ++i) p.parts[i].seconds = seconds[i];
  } else {
    measure_parts({{"model", copy}}, sample.input, at, device, /*pipeline=*/false, p);
  }
  for (const ModelProfile::Part& part : p.parts) p.forward_flops_per_sample += part.forward_flops_per_sample;
  p.largest_part = largest_unit_numel(*copy, container_units(*copy));
  describe_transformer(copy, sample.input, p);
  return p;
}

}  // namespace loom::parallel
