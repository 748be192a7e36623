#include "parallel/pipeline/pipeline.h"

#include <chrono>
#include <map>

#include "parallel/trace.h"
#include "tensor/device_queue.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {

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

std::vector<nn::ModulePtr> stage_chunks(const std::vector<nn::ModulePtr>& parts, int stage, int stages,
                                        Placement placement) {
  LOOM_CHECK(stages >= 1 && stage >= 0 && stage < stages && parts.size() % stages == 0 &&
                 (placement == Placement::Loop || static_cast<int>(parts.size()) == 2 * stages),
             "stage_chunks: stage ", stage, " of ", stages, " among ", parts.size(), " parts",
             placement == Placement::V ? " in a V" : "");
  std::vector<nn::ModulePtr> chunks;
  for (int c = 0; c < static_cast<int>(parts.size()) / stages; ++c)
    chunks.push_back(parts[part_at({stage, c}, stages, placement)]);
  return chunks;
}

TensorList parameters_of(const std::vector<nn::ModulePtr>& modules) {
  TensorList out;
  for (const auto& module : modules)
    for (const Tensor& p : module->parameters()) out.push_back(p);
  return out;
}

Pipeline::Pipeline(std::vector<nn::ModulePtr> parts, std::vector<Device> devices, PipelineOptions options)
    : parts_(std::move(parts)), devices_(std::move(devices)), options_(options),
      activations_(parts_.size()), gradients_(parts_.size()) {
  LOOM_CHECK(options.chunks >= 1, "Pipeline: chunks must be positive, got ", options.chunks);
  LOOM_CHECK(!devices_.empty() && parts_.size() == devices_.size() * options.chunks, "Pipeline: got ", parts_.size(),
             " stages for ", devices_.size(), " devices", options.chunks > 1 ? " and " : "",
             options.chunks > 1 ? std::to_string(options.chunks) + " chunks each" : "");
  LOOM_CHECK(options.micro_batches >= 1, "Pipeline: micro_batches must be positive, got ", options.micro_batches);
  const int stages = static_cast<int>(devices_.size());
  schedule_ = make_schedule(options.schedule, stages, options.micro_batches, options.chunks,  // checks the chunks
                            options.part_times);
  // A parameter in two parts would be moved to the later part's device,
  // listed (and stepped) twice, and get its gradient added by two stage
  // threads at once, on a GPU from two streams in no order.
  std::map<const TensorImpl*, size_t> owner;
  for (size_t i = 0; i < parts_.size(); ++i)
    for (const Tensor& p : parts_[i]->parameters()) {
      const auto [it, first] = owner.emplace(p.impl(), i);
      LOOM_CHECK(first || it->second == i, "Pipeline: stages ", it->second, " and ", i, " share a parameter (",
                 p.shape(), "); each stage must own its parameters: give the later stage a module of its own");
    }
  for (size_t i = 0; i < parts_.size(); ++i) parts_[i]->to(device_of_part(i));
  for (size_t s = 0; s < devices_.size(); ++s)
    lanes_.push_back(trace::lane("stage " + std::to_string(s) + " (" + devices_[s].str() + ")"));
  for (const Device& d : devices_) queues_.emplace_back(d);
  workers_ = std::make_unique<WorkerPool>(stages);
}

TensorList Pipeline::parameters() const { return parameters_of(parts_); }

namespace {

// Stage s's links: mailboxes shared with the parts before and after each of
// its chunks in this process; a tensor is moved to the receiving part's
// device as it is sent.
class MailboxLinks : public StageLinks {
 public:
  MailboxLinks(std::vector<Mailbox>& activations, std::vector<Mailbox>& gradients, const std::vector<Device>& devices,
               int stage, Placement placement, int lane)
      : StageLinks(lane), activations_(activations), gradients_(gradients), devices_(devices), s_(stage),
        placement_(placement) {}

 protected:
  Tensor take_activation(int chunk, int mb) override { return activations_[part(chunk) - 1].take(mb); }
  bool put_activation(int chunk, int mb, const Tensor& a) override {
    const int to = part(chunk) + 1, stage = stage_of(to);
    activations_[to - 1].put(mb, a.to(devices_[stage]));
    return stage != s_;
  }
  Tensor take_gradient(int chunk, int mb, const Tensor&) override { return gradients_[part(chunk)].take(mb); }
  bool put_gradient(int chunk, int mb, const Tensor& g) override {
    const int to = part(chunk) - 1, stage = stage_of(to);
    gradients_[to].put(mb, g.to(devices_[stage]));
    return stage != s_;
  }

 private:
  int stages() const { return static_cast<int>(devices_.size()); }
  int part(int chunk) const { return part_at({s_, chunk}, stages(), placement_); }
  int stage_of(int part) const {
    return place_part(part, stages(), static_cast<int>(activations_.size()) / stages(), placement_).stage;
  }

  std::vector<Mailbox>& activations_;  // [i]: from part i to i + 1
  std::vector<Mailbox>& gradients_;    // [i]: from part i + 1 to i
  const std::vector<Device>& devices_;
  const int s_;
  const Placement placement_;
};

}  // namespace

std::string timeline(const PipelineStats& stats, int width) {
  std::vector<std::vector<PassTime>> passes;
  for (const StageStats& stage : stats.stages) passes.push_back(stage.passes);
  return timeline(passes, stats.step_seconds, width);
}

Tensor Pipeline::train_step(const Tensor& x, const Tensor& y, const LossFn& loss) {
  LOOM_CHECK(x.defined() && y.defined() && x.size(0) == y.size(0), "Pipeline: inputs and targets need the same batch size");
  const int m = options_.micro_batches;
  const TensorList inputs = split_micro_batches(x, m, "Pipeline"), targets = split_micro_batches(y, m, "Pipeline");
  for (auto* boxes : {&activations_, &gradients_})
    for (Mailbox& box : *boxes) box.reset();
  const int stages = static_cast<int>(devices_.size());
  stats_ = PipelineStats();
  stats_.stages.resize(stages);
  std::vector<Tensor> losses(m);

  const auto start = std::chrono::steady_clock::now();
  // Each stage works on a queue of its own (stages sharing a GPU overlap),
  // after what this thread queued: the micro-batches.
  std::vector<DeviceMark> inputs_ready, stage_done(stages);
  for (const Device& d : devices_) inputs_ready.push_back(DeviceMark::here(d));
  // The batch may sit on a device no stage runs on (another GPU): the stages
  // copy it from there on their queue of that device, which must follow
  // this thread's work on it too.
  const DeviceMark x_ready = DeviceMark::here(x.device()), y_ready = DeviceMark::here(y.device());
  workers_->run([&](int s) {
    try {  // all of it: a stage that throws before its first send must still wake the others
      DeviceQueue::Scope own_queue(queues_[s]);
      inputs_ready[s].wait_here();
      x_ready.wait_here();
      y_ready.wait_here();
      used_here(x);
      used_here(y);
      StageTask task{.chunks = {}, .device = devices_[s], .lane = lanes_[s], .step_start = start};
      const Placement placement = placement_of(options_.schedule);
      for (const nn::ModulePtr& chunk : stage_chunks(parts_, s, stages, placement)) task.chunks.push_back(*chunk);
      if (s == stage_of_part(0)) task.first.emplace(FirstStage{inputs});
      if (s == stage_of_part(parts_.size() - 1)) task.last.emplace(LastStage{targets, loss, x.size(0), losses});
      MailboxLinks links(activations_, gradients_, devices_, s, placement, lanes_[s]);
      stats_.stages[s] = run_stage(schedule_[s], task, links);
      stage_done[s] = DeviceMark::here(devices_[s]);
    } catch (const std::exception& e) {
      // Wake the other stages: they would wait forever for this one.
      for (auto* boxes : {&activations_, &gradients_})
        for (Mailbox& box : *boxes) box.fail("stage " + std::to_string(s) + " failed: " + e.what());
      throw;
    }
  });
  // This thread's queues wait for the stages: losses and gradients are theirs.
  for (int s = 0; s < stages; ++s) stage_done[s].wait_here();
  for (const Tensor& l : losses) used_here(l);
  stats_.step_seconds = seconds_since(start);
  for (StageStats& st : stats_.stages) {
    st.idle_fraction = std::max(0.0, 1 - st.busy_seconds / stats_.step_seconds);
    stats_.bubble_fraction += st.idle_fraction / stats_.stages.size();
  }
  return sum_losses(losses);
}

Tensor Pipeline::forward(const Tensor& x) {
  NoGradGuard no_grad;
  TensorList outputs;
  // The same micro-batches as train_step's (fewer when the batch is smaller).
  const int m = static_cast<int>(std::min<int64_t>(options_.micro_batches, x.size(0)));
  for (const Tensor& part : split_micro_batches(x, m, "Pipeline::forward")) {
    Tensor h = part;
    for (size_t i = 0; i < parts_.size(); ++i) h = parts_[i]->forward(h.to(device_of_part(i)));
    outputs.push_back(h);
  }
  return cat(outputs, 0);
}

}  // namespace loom::parallel
