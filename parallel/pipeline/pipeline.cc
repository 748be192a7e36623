#include "parallel/pipeline/pipeline.h"

#include <chrono>

#include "autograd/engine.h"
#include "parallel/trace.h"

namespace loom::parallel {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

std::vector<nn::ModulePtr> split_sequential(const nn::Sequential& model, const std::vector<int>& boundaries) {
  const int n = static_cast<int>(model->size());
  std::vector<nn::ModulePtr> parts;
  int start = 0;
  for (size_t i = 0; i <= boundaries.size(); ++i) {
    const int end = i < boundaries.size() ? boundaries[i] : n;
    LOOM_CHECK(end > start && end <= n, "split_sequential: boundaries ", Shape(std::vector<int64_t>(boundaries.begin(), boundaries.end())),
               " must increase strictly within (0, ", n, ")");
    auto part = std::make_shared<nn::SequentialImpl>();
    for (int c = start; c < end; ++c) part->push_back((*model)[c]);
    parts.push_back(part);
    start = end;
  }
  return parts;
}

Pipeline::Pipeline(std::vector<nn::ModulePtr> stages, std::vector<Device> devices, PipelineOptions options)
    : stages_(std::move(stages)), devices_(std::move(devices)), options_(options),
      activations_(stages_.size()), gradients_(stages_.size()) {
  LOOM_CHECK(!stages_.empty() && stages_.size() == devices_.size(), "Pipeline: got ", stages_.size(),
             " stages for ", devices_.size(), " devices");
  LOOM_CHECK(options.micro_batches >= 1, "Pipeline: micro_batches must be positive, got ", options.micro_batches);
  for (size_t s = 0; s < stages_.size(); ++s) stages_[s]->to(devices_[s]);
  schedule_ = make_schedule(options.schedule, static_cast<int>(stages_.size()), options.micro_batches);
  workers_ = std::make_unique<WorkerPool>(static_cast<int>(stages_.size()));
}

TensorList Pipeline::parameters() const {
  TensorList out;
  for (const auto& stage : stages_)
    for (const Tensor& p : stage->parameters()) out.push_back(p);
  return out;
}

void Pipeline::run_stage(int s, const TensorList& inputs, const TensorList& targets, const LossFn& loss_fn,
                         int64_t batch, std::vector<Tensor>& losses) {
  const int last = static_cast<int>(stages_.size()) - 1;
  const Device device = devices_[s];
  StageStats& stats = stats_.stages[s];
  const int lane = trace::lane("stage " + std::to_string(s) + " (" + device.str() + ")");
  std::map<int, Tensor> stage_inputs, stage_outputs;  // activations held for backward
  // Busy time counts the passes themselves; waiting for a neighbour is idle.
  auto timed = [&](const char* name, auto&& pass) {
    const auto start = std::chrono::steady_clock::now();
    trace::Span span(name, "compute", lane);
    pass();
    stats.busy_seconds += seconds_since(start);
  };
  for (const Action& a : schedule_[s]) {
    const int mb = a.micro_batch;
    if (a.pass == Pass::Forward) {
      Tensor in = s == 0 ? inputs[mb].to(device) : activations_[s - 1].take(mb);
      if (s > 0) in = in.detach().requires_grad_();  // this stage's graph starts here
      Tensor out;
      timed("forward", [&] {
        out = stages_[s]->forward(in);
        if (s == last) {
          // Weighted by the micro-batch's share, the losses add up to the batch's.
          const double share = static_cast<double>(inputs[mb].size(0)) / batch;
          out = loss_fn(out, targets[mb].to(device)) * share;
          losses[mb] = out.detach();
        }
      });
      if (s < last) {
        Tensor sent = out.detach().to(devices_[s + 1]);
        stats.bytes_sent += bytes_of(sent);
        activations_[s].put(mb, sent);
      }
      stage_inputs[mb] = in;
      stage_outputs[mb] = out;
      stats.peak_in_flight = std::max(stats.peak_in_flight, static_cast<int>(stage_outputs.size()));
    } else {
      Tensor grad = s == last ? Tensor() : gradients_[s].take(mb);
      timed("backward", [&] {
        if (s == last)
          autograd::backward({stage_outputs.at(mb)});
        else
          autograd::backward({stage_outputs.at(mb)}, {grad});
      });
      if (s > 0) {
        Tensor sent = stage_inputs.at(mb).grad().to(devices_[s - 1]);
        stats.bytes_sent += bytes_of(sent);
        gradients_[s - 1].put(mb, sent);
      }
      stage_inputs.erase(mb);
      stage_outputs.erase(mb);  // its activations are freed
    }
  }
}

Tensor Pipeline::train_step(const Tensor& x, const Tensor& y, const LossFn& loss) {
  LOOM_CHECK(x.defined() && y.defined() && x.size(0) == y.size(0), "Pipeline: inputs and targets need the same batch size");
  const int m = options_.micro_batches;
  LOOM_CHECK(x.size(0) >= m, "Pipeline: a batch of ", x.size(0), " cannot make ", m, " micro-batches");
  TensorList inputs = chunk(x.detach(), m, 0), targets = chunk(y.detach(), m, 0);
  for (auto* boxes : {&activations_, &gradients_})
    for (Mailbox& box : *boxes) box.reset();
  stats_ = PipelineStats();
  stats_.stages.resize(stages_.size());
  std::vector<Tensor> losses(m);

  const auto start = std::chrono::steady_clock::now();
  workers_->run([&](int s) {
    try {
      run_stage(s, inputs, targets, loss, x.size(0), losses);
    } catch (const std::exception& e) {
      // Wake the other stages: they would wait forever for this one.
      for (auto* boxes : {&activations_, &gradients_})
        for (Mailbox& box : *boxes) box.fail("stage " + std::to_string(s) + " failed: " + e.what());
      throw;
    }
  });
  stats_.step_seconds = seconds_since(start);
  for (StageStats& st : stats_.stages) {
    st.idle_fraction = std::max(0.0, 1 - st.busy_seconds / stats_.step_seconds);
    stats_.bubble_fraction += st.idle_fraction / stats_.stages.size();
  }
  Tensor total = losses[0];
  for (int i = 1; i < m; ++i) total = total + losses[i];
  return total;
}

Tensor Pipeline::forward(const Tensor& x) {
  NoGradGuard no_grad;
  TensorList outputs;
  for (const Tensor& part : chunk(x, std::min<int64_t>(options_.micro_batches, x.size(0)), 0)) {
    Tensor h = part;
    for (size_t s = 0; s < stages_.size(); ++s) h = stages_[s]->forward(h.to(devices_[s]));
    outputs.push_back(h);
  }
  return cat(outputs, 0);
}

LayerSplitImpl::LayerSplitImpl(std::vector<nn::ModulePtr> stages, std::vector<Device> devices)
    : Module("LayerSplit"), stages_(std::move(stages)), devices_(std::move(devices)) {
  LOOM_CHECK(!stages_.empty() && stages_.size() == devices_.size(), "LayerSplit: got ", stages_.size(),
             " stages for ", devices_.size(), " devices");
  for (size_t s = 0; s < stages_.size(); ++s) {
    stages_[s]->to(devices_[s]);
    register_module(std::to_string(s), stages_[s]);
  }
}

Tensor LayerSplitImpl::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t s = 0; s < stages_.size(); ++s) {
    trace::Span span("forward", "compute", trace::lane("layer split " + devices_[s].str()));
    h = stages_[s]->forward(h.to(devices_[s]));  // the copy is recorded: gradients go back the same way
  }
  return h;
}

}  // namespace loom::parallel
