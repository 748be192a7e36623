#include "parallel/pipeline/distributed_pipeline.h"

#include <algorithm>
#include <string>

#include "parallel/trace.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {
namespace {

// An activation's header: dtype, number of dims, then the dims (unused ones 0).
constexpr int kMaxDims = 8;
constexpr int64_t kHeaderLength = 2 + kMaxDims;

// Each micro-batch has its own tags, so messages match whatever order a
// schedule runs its micro-batches in.
int activation_tag(int micro_batch) { return 2 * micro_batch; }
int gradient_tag(int micro_batch) { return 2 * micro_batch + 1; }
constexpr int kMaxMicroBatches = (ProcessGroup::kMaxTag + 1) / 2;

// A stage's links to the ranks before and after it. Sends are collected and
// waited for at the end of the step, so that a failed send is reported; when
// tracing, each appears on the rank's communication lane from issue to completion.
class GroupLinks : public StageLinks {
 public:
  GroupLinks(ProcessGroup& group, Device device, int lane, int sends_lane)
      : StageLinks(lane), group_(group), device_(device), sends_lane_(sends_lane) {}

  void wait_for_sends() {
    const bool tracing = trace::enabled();
    for (const Send& send : sends_) {
      send.work->wait();
      if (tracing)
        trace::record(send.what + std::to_string(send.micro_batch), "communication", sends_lane_, send.issued_us,
                      trace::to_us(send.work->completed_at()));
    }
    sends_.clear();
  }

 protected:
  Tensor take_activation(int mb) override {
    Tensor header = empty({kHeaderLength}, {.dtype = kInt64});
    group_.recv(header, previous(), activation_tag(mb))->wait();
    const int64_t* h = header.data_ptr<int64_t>();
    LOOM_CHECK(h[0] >= 0 && h[0] <= static_cast<int64_t>(kFloat64) && h[1] >= 0 && h[1] <= kMaxDims, "rank ",
               group_.rank(), ": the activation header from rank ", previous(), " for micro-batch ", mb,
               " is malformed (dtype ", h[0], ", ", h[1], " dims)");
    Tensor activation = empty(Shape(std::vector<int64_t>(h + 2, h + 2 + h[1])),
                              {.dtype = static_cast<DType>(h[0]), .device = device_});
    group_.recv(activation, previous(), activation_tag(mb))->wait();
    return activation;
  }

  void put_activation(int mb, const Tensor& activation) override {
    LOOM_CHECK(activation.dim() <= kMaxDims, "DistributedPipeline: rank ", group_.rank(), " sends a ",
               activation.dim(), "-d activation; at most ", kMaxDims, " dims travel between stages");
    std::vector<int64_t> header(kHeaderLength, 0);
    header[0] = static_cast<int64_t>(activation.dtype());
    header[1] = activation.dim();
    for (int64_t d = 0; d < activation.dim(); ++d) header[2 + d] = activation.size(d);
    const int64_t issued = trace::now_us();
    group_.send(from_vector(header), next(), activation_tag(mb));  // done when the next one is
    sends_.push_back({"send activation ", mb, issued, group_.send(activation.contiguous(), next(), activation_tag(mb))});
  }

  Tensor take_gradient(int mb, const Tensor& output) override {
    Tensor gradient = empty(output.shape(), {.dtype = output.dtype(), .device = output.device()});
    group_.recv(gradient, next(), gradient_tag(mb))->wait();
    return gradient;
  }

  void put_gradient(int mb, const Tensor& gradient) override {
    sends_.push_back({"send gradient ", mb, trace::now_us(), group_.send(gradient.contiguous(), previous(), gradient_tag(mb))});
  }

 private:
  int previous() const { return group_.rank() - 1; }
  int next() const { return group_.rank() + 1; }

  struct Send {
    const char* what;  // the span's name, without the micro-batch (named only when traced)
    int micro_batch;
    int64_t issued_us;
    WorkPtr work;
  };
  ProcessGroup& group_;
  Device device_;
  int sends_lane_;
  std::vector<Send> sends_;
};

}  // namespace

DistributedPipeline::DistributedPipeline(nn::ModulePtr stage, std::shared_ptr<ProcessGroup> group,
                                         PipelineOptions options, Device device)
    : stage_(std::move(stage)), group_(std::move(group)), options_(options), device_(device) {
  LOOM_CHECK(stage_ && group_, "DistributedPipeline: needs a stage and a process group");
  LOOM_CHECK(options.micro_batches >= 1 && options.micro_batches <= kMaxMicroBatches,
             "DistributedPipeline: micro_batches must be in [1, ", kMaxMicroBatches, "], got ", options.micro_batches);
  rank_ = group_->rank();
  stages_ = group_->size();
  stage_->to(device_);
  lane_ = trace::lane("stage " + std::to_string(rank_) + " (rank " + std::to_string(rank_) + ")");
  sends_lane_ = trace::lane("stage " + std::to_string(rank_) + " sends");
  schedule_ = make_schedule(options.schedule, stages_, options.micro_batches);
}

DistributedPipeline::DistributedPipeline(nn::ModulePtr stage, std::shared_ptr<ProcessGroup> group,
                                         std::shared_ptr<ProcessGroup> data_group, PipelineOptions options,
                                         Device device)
    : DistributedPipeline(std::move(stage), std::move(group), options, device) {
  LOOM_CHECK(data_group, "DistributedPipeline: no data group");
  NoGradGuard no_grad;
  WorkPtr last;
  TensorList params;
  std::vector<std::string> names;
  for (const auto& [name, p] : stage_->named_parameters()) {
    last = data_group->broadcast(p, 0);
    if (!p.requires_grad()) continue;
    params.push_back(p);
    names.push_back(name);
  }
  for (const Tensor& b : stage_->buffers()) last = data_group->broadcast(b, 0);
  if (last) last->wait();
  data_reducer_ = Reducer::create(params, names, std::move(data_group), {});
}

Tensor DistributedPipeline::train_step(const Tensor& x, const Tensor& y, const LossFn& loss) {
  const int m = options_.micro_batches;
  const bool first = rank_ == 0, last = rank_ == stages_ - 1;
  TensorList inputs, targets;
  if (first) inputs = split_micro_batches(x, m, "DistributedPipeline (rank 0's inputs)");
  if (last) targets = split_micro_batches(y, m, "DistributedPipeline (the last rank's targets)");
  std::vector<Tensor> losses(last ? m : 0);

  StageTask task{.module = *stage_, .device = device_, .lane = lane_};
  if (data_reducer_)  // the last backward averages the gradients accumulated over the micro-batches
    task.before_backward = [this](bool last_backward) { data_reducer_->prepare_for_backward(last_backward); };
  if (first) task.first.emplace(FirstStage{inputs});
  if (last) task.last.emplace(LastStage{targets, loss, y.size(0), losses});
  GroupLinks links(*group_, device_, lane_, sends_lane_);
  const Stopwatch watch;
  stats_ = run_stage(actions(), task, links);
  links.wait_for_sends();
  step_seconds_ = watch.seconds();
  stats_.idle_fraction = std::max(0.0, 1 - stats_.busy_seconds / step_seconds_);
  return last ? sum_losses(losses) : Tensor();
}

Tensor DistributedPipeline::forward(const Tensor& x) {
  NoGradGuard no_grad;
  const bool first = rank_ == 0, last = rank_ == stages_ - 1;
  TensorList inputs;
  if (first) inputs = split_micro_batches(x, options_.micro_batches, "DistributedPipeline::forward (rank 0's inputs)");
  GroupLinks links(*group_, device_, lane_, sends_lane_);
  TensorList outputs;
  for (int mb = 0; mb < options_.micro_batches; ++mb) {
    Tensor out = stage_->forward(first ? inputs[mb].to(device_) : links.receive_activation(mb));
    if (last)
      outputs.push_back(out);
    else
      links.send_activation(mb, out);
  }
  links.wait_for_sends();
  return last ? cat(outputs, 0) : Tensor();
}

void share_stage_weights(const std::vector<nn::ModulePtr>& stages, ProcessGroup& group) {
  LOOM_CHECK(static_cast<int>(stages.size()) == group.size(), "share_stage_weights: ", stages.size(),
             " stages for ", group.size(), " ranks");
  NoGradGuard no_grad;
  WorkPtr last;
  for (int s = 0; s < group.size(); ++s) {
    for (const Tensor& t : stages[s]->parameters()) last = group.broadcast(t, s);
    for (const Tensor& t : stages[s]->buffers()) last = group.broadcast(t, s);
  }
  if (last) last->wait();  // the group finishes operations in order
}

}  // namespace loom::parallel
