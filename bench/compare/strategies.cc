#include "bench/compare/strategies.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <thread>

#include "autograd/engine.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "autograd/checkpoint.h"
#include "examples/models/models.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/comm/for_device.h"
#include "parallel/comm/thread_group.h"
#include "parallel/data_parallel.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/pipeline/balance.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/layer_split.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/sharding/fsdp.h"
#include "parallel/sharding/memory_model.h"
#include "parallel/sharding/zero.h"
#include "parallel/trace.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/stopwatch.h"
#include "bench/compare/measuring.h"

namespace loom::bench {
StagePlan plan_stages(const Workload& w, int stages, const std::vector<int>& given) {
  StagePlan plan;
  parallel::Profile& p = plan.profile;
  p.input_bytes = bytes_in(w.input);
  for (const Tensor& t : w.model->parameters()) p.parameter_bytes += bytes_in(t);
  auto seq = as_sequential(w.model);
  if (seq && static_cast<int>(seq->size()) >= stages) {
    const parallel::ChildCosts t = parallel::time_children(nn::Sequential(seq), w.input);
    plan.boundaries = given.empty() ? parallel::balanced_boundaries(t.seconds(), stages) : given;
    plan.part_times = parallel::part_pass_times(t, plan.boundaries);
    for (const parallel::PassTimes& part : plan.part_times) {
      p.stage_forward_s.push_back(part.forward);
      p.stage_backward_s.push_back(part.backward_input + part.backward_weight);
    }
    for (int end : plan.boundaries) p.boundary_bytes.push_back(static_cast<double>(t.output_bytes[end - 1]));
  }
  // The whole model's forward and backward (the only "stage" of a model that
  // is not cut), the optimizer step, and the output size.
  nn::ModulePtr model = w.model->clone();
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  std::vector<double> fwd, bwd, optimizer;
  for (int rep = 0; rep < 3; ++rep) {
    auto start = Clock::now();
    Tensor out = model->forward(w.input);
    Tensor loss = w.loss(out, w.target);
    synchronize(w.input.device());
    fwd.push_back(seconds_since(start));
    opt.zero_grad();
    start = Clock::now();
    loss.backward();
    synchronize(w.input.device());
    bwd.push_back(seconds_since(start));
    start = Clock::now();
    opt.step();
    synchronize(w.input.device());
    optimizer.push_back(seconds_since(start));
    p.output_bytes = bytes_in(out);
  }
  p.optimizer_s = median(optimizer);
  if (p.stage_forward_s.empty()) {
    p.stage_forward_s = {median(fwd)};
    p.stage_backward_s = {median(bwd)};
  }
  return plan;
}

namespace {

// Runs a module's forward under activation checkpointing, holding it as a
// child so that its parameters keep their place.
class CheckpointedImpl : public nn::Module {
 public:
  explicit CheckpointedImpl(nn::ModulePtr inner) : Module("Checkpointed"), inner_(std::move(inner)) {
    register_module("inner", inner_);
  }
  Tensor forward(const Tensor& x) override {
    return autograd::checkpoint([inner = inner_](const Tensor& in) { return inner->forward(in); }, x);
  }
  nn::ModulePtr clone(std::optional<Device> device) const override {
    return std::make_shared<CheckpointedImpl>(inner_->clone(device));
  }

 private:
  nn::ModulePtr inner_;
};

// A Sequential in about sqrt(n) checkpointed segments.
class CheckpointedSequentialImpl : public nn::Module {
 public:
  explicit CheckpointedSequentialImpl(nn::Sequential seq) : Module("CheckpointedSequential"), seq_(seq) {
    register_module("seq", seq);
    segments_ = std::max(1, static_cast<int>(std::lround(std::sqrt(static_cast<double>(seq->size())))));
  }
  Tensor forward(const Tensor& x) override { return nn::checkpoint_sequential(seq_, segments_, x); }
  nn::ModulePtr clone(std::optional<Device> device) const override {
    return std::make_shared<CheckpointedSequentialImpl>(nn::Sequential(seq_->clone(device)));
  }

 private:
  nn::Sequential seq_;
  int segments_ = 1;
};

// A GPT whose blocks each run under checkpointing (GPTImpl::forward, block by block).
class CheckpointedGptImpl : public nn::Module {
 public:
  explicit CheckpointedGptImpl(models::GPT gpt) : Module("CheckpointedGPT"), gpt_(gpt) { register_module("gpt", gpt); }
  Tensor forward(const Tensor& idx) override {
    Tensor positions = arange(idx.size(1), {.dtype = kInt64, .device = idx.device()});
    Tensor x = gpt_->dropout->forward(gpt_->wte->forward(idx) + gpt_->wpe->forward(positions));
    for (size_t l = 0; l < gpt_->blocks->size(); ++l) {
      nn::ModulePtr block = (*gpt_->blocks)[l];
      x = autograd::checkpoint([block](const Tensor& in) { return block->forward(in); }, x);
    }
    return gpt_->head->forward(gpt_->ln_f->forward(x));
  }
  nn::ModulePtr clone(std::optional<Device> device) const override {
    return std::make_shared<CheckpointedGptImpl>(models::GPT(gpt_->clone(device)));
  }

 private:
  models::GPT gpt_;
};

}  // namespace

Workload checkpointed(const Workload& w) {
  Workload out = w;
  if (auto seq = as_sequential(w.model))
    out.model = std::make_shared<CheckpointedSequentialImpl>(nn::Sequential(seq->clone()));
  else if (auto gpt = std::dynamic_pointer_cast<models::GPTImpl>(w.model))
    out.model = std::make_shared<CheckpointedGptImpl>(models::GPT(gpt->clone()));
  else
    out.model = std::make_shared<CheckpointedImpl>(w.model->clone());
  return out;
}

Measurement run_strategy(const std::string& strategy, const Workload& w, const StagePlan& plan,
                         const CompareConfig& config) {
  const std::string suffix = "_ckpt";
  if (strategy.size() > suffix.size() && strategy.compare(strategy.size() - suffix.size(), suffix.size(), suffix) == 0) {
    Measurement m = run_strategy(strategy.substr(0, strategy.size() - suffix.size()), checkpointed(w), plan, config);
    m.strategy = strategy;
    return m;
  }
  const std::vector<int>& boundaries = plan.boundaries;
  Measurement skipped{strategy};
  const bool over_ranks = config.group != nullptr;
  if (over_ranks && (strategy == "dp" || strategy == "layer_split")) {
    skipped.skipped = "one process drives every device; run compare_parallel without mpirun";
    return skipped;
  }
  if (strategy == "single") return run_single(w, config);
  if (strategy == "dp") return run_dp(w, config);
  if (parallel::is_ddp(strategy) || strategy == "zero1" || strategy == "zero2" || strategy == "fsdp")
    return run_data_parallel(strategy, w, config);
  if (strategy == "hybrid") return run_hybrid(w, config);
  if (strategy == "tp") return run_tensor_parallel(w, config, {"tp", 1, config.devices});
  if (strategy == "tp-sp")
    return run_tensor_parallel(w, config, {"tp-sp", 1, config.devices, parallel::TokenLayout::kSequenceSharded});
  if (strategy == "cp" || strategy == "cp-zigzag" || strategy == "cp-ring" || strategy == "cp-ring-zigzag" ||
      strategy == "cp-ulysses" || strategy == "cp-ulysses-zigzag") {
    const bool zigzag = strategy.find("zigzag") != std::string::npos;
    const auto exchange = strategy.rfind("cp-ring", 0) == 0      ? parallel::KeyValueExchange::kRing
                          : strategy.rfind("cp-ulysses", 0) == 0 ? parallel::KeyValueExchange::kAllToAll
                                                                 : parallel::KeyValueExchange::kAllGather;
    return run_context_parallel(w, config, zigzag ? parallel::SequenceSplit::kZigZag : parallel::SequenceSplit::kContiguous,
                                exchange);
  }
  if (strategy == "cp-tp") return run_context_tensor_parallel(w, config);
  if (strategy == "hybrid-tp")
    return run_tensor_parallel(w, config, {"hybrid-tp", config.mesh_data, config.mesh_pipeline});
  if (boundaries.empty()) {
    skipped.skipped = "the model is not a Sequential of at least " + std::to_string(config.devices) + " children";
    return skipped;
  }
  if (strategy == "layer_split") return run_layer_split(w, plan, config);
  LOOM_CHECK(parallel::is_pipeline(strategy), "compare_parallel: unknown strategy '", strategy, "'");
  const int chunks = parallel::chunks_of(strategy);
  if (chunks > 1) {  // interleaved or zb-v: `chunks` parts a stage, cut apart
    if (strategy == "interleaved" && config.micro_batches % config.devices != 0) {
      skipped.skipped = "needs --micro-batches a multiple of the " + std::to_string(config.devices) + " stages";
      return skipped;
    }
    auto plan = config.chunk_plans.find(chunks);
    if (plan == config.chunk_plans.end() || plan->second.boundaries.empty()) {
      skipped.skipped =
          "the model is not a Sequential of at least " + std::to_string(chunks * config.devices) + " children";
      return skipped;
    }
    if (over_ranks && config.group->backend().find("nccl") != std::string::npos) {
      skipped.skipped = "a " + config.group->backend() + " group finishes sends and receives in issue order "
                        "(docs/pipeline.md, Interleaved 1F1B)";
      return skipped;
    }
  }
  const std::vector<int>& cuts = chunks > 1 ? config.chunk_plans.at(chunks).boundaries : boundaries;
  return over_ranks ? run_pipeline_ranks(strategy, w, cuts, config) : run_pipeline(strategy, w, cuts, config);
}

}  // namespace loom::bench
