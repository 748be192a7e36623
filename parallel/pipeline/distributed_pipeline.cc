#include "parallel/pipeline/distributed_pipeline.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "parallel/trace.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {
namespace {

// An activation's header: dtype, number of dims, then the dims (unused ones 0).
constexpr int kMaxDims = 8;
constexpr int64_t kHeaderLength = 2 + kMaxDims;

// Each message between two parts has its own tag, so messages match whatever
// order a schedule runs its micro-batches in. Between parts i and i + 1 the
// tag holds i's chunk and the micro-batch: MPI matches the sender's rank too,
// and from one rank the chunk tells its links apart. Activations even,
// gradients odd.
int link_tag(int chunk, int micro_batch, int micro_batches, bool gradient) {
  return 2 * (chunk * micro_batches + micro_batch) + (gradient ? 1 : 0);
}
constexpr int kMaxMessages = (ProcessGroup::kMaxTag + 1) / 2;  // per direction: chunks x micro-batches

// A stage's links to the ranks that run the parts before and after each of
// its chunks. Sends are collected and waited for at the end of the step, so
// that a failed send is reported. Between two parts on this rank (the V's
// turn in ZB-V) the tensor is handed over in memory.
class GroupLinks : public StageLinks {
 public:
  GroupLinks(ProcessGroup& group, Device device, int micro_batches, int chunks, Placement placement, int lane)
      : StageLinks(lane), group_(group), device_(device), micro_batches_(micro_batches), chunks_(chunks),
        placement_(placement) {}

  void wait_for_sends() {
    for (const WorkPtr& send : sends_) send->wait();
    sends_.clear();
  }

 protected:
  Tensor take_activation(int chunk, int mb) override {
    const StageChunk from = neighbour(chunk, -1);
    if (from.stage == group_.rank()) return take_local(activations_here_, chunk, mb, "activation");
    const int tag = link_tag(from.chunk, mb, micro_batches_, false);
    Tensor header = empty({kHeaderLength}, {.dtype = kInt64});
    group_.recv(header, from.stage, tag)->wait();
    const int64_t* h = header.data_ptr<int64_t>();
    LOOM_CHECK(h[0] >= 0 && h[0] <= static_cast<int64_t>(kFloat64) && h[1] >= 0 && h[1] <= kMaxDims, "rank ",
               group_.rank(), ": the activation header from rank ", from.stage, " for micro-batch ", mb,
               " is malformed (dtype ", h[0], ", ", h[1], " dims)");
    Tensor activation = empty(Shape(std::vector<int64_t>(h + 2, h + 2 + h[1])),
                              {.dtype = static_cast<DType>(h[0]), .device = device_});
    group_.recv(activation, from.stage, tag)->wait();
    return activation;
  }

  bool put_activation(int chunk, int mb, const Tensor& activation) override {
    const StageChunk to = neighbour(chunk, +1);
    if (to.stage == group_.rank()) {
      activations_here_[{to.chunk, mb}] = activation;
      return false;
    }
    const int tag = link_tag(chunk, mb, micro_batches_, false);
    LOOM_CHECK(activation.dim() <= kMaxDims, "DistributedPipeline: rank ", group_.rank(), " sends a ",
               activation.dim(), "-d activation; at most ", kMaxDims, " dims travel between stages");
    std::vector<int64_t> header(kHeaderLength, 0);
    header[0] = static_cast<int64_t>(activation.dtype());
    header[1] = activation.dim();
    for (int64_t d = 0; d < activation.dim(); ++d) header[2 + d] = activation.size(d);
    group_.send(from_vector(header), to.stage, tag);  // the op keeps the header alive; the activation follows it
    sends_.push_back(group_.send(activation.contiguous(), to.stage, tag));
    return true;
  }

  Tensor take_gradient(int chunk, int mb, const Tensor& output) override {
    const StageChunk from = neighbour(chunk, +1);
    if (from.stage == group_.rank()) return take_local(gradients_here_, chunk, mb, "gradient");
    Tensor gradient = empty(output.shape(), {.dtype = output.dtype(), .device = output.device()});
    group_.recv(gradient, from.stage, link_tag(chunk, mb, micro_batches_, true))->wait();
    return gradient;
  }

  bool put_gradient(int chunk, int mb, const Tensor& gradient) override {
    const StageChunk to = neighbour(chunk, -1);
    if (to.stage == group_.rank()) {
      gradients_here_[{to.chunk, mb}] = gradient;
      return false;
    }
    const int tag = link_tag(to.chunk, mb, micro_batches_, true);
    sends_.push_back(group_.send(gradient.contiguous(), to.stage, tag));
    return true;
  }

 private:
  // Where the part before (-1) or after (+1) this rank's `chunk` runs.
  StageChunk neighbour(int chunk, int step) const {
    const int part = part_at({group_.rank(), chunk}, group_.size(), placement_) + step;
    return place_part(part, group_.size(), chunks_, placement_);
  }
  // A tensor handed over on this rank: it was put when the schedule ran the
  // part before (or after), which a valid schedule runs first.
  static Tensor take_local(std::map<std::pair<int, int>, Tensor>& here, int chunk, int mb, const char* what) {
    auto it = here.find({chunk, mb});
    LOOM_CHECK(it != here.end(), "DistributedPipeline: chunk ", chunk, " needs micro-batch ", mb, "'s ", what,
               " from this rank before the schedule made it");
    Tensor t = std::move(it->second);
    here.erase(it);
    return t;
  }

  ProcessGroup& group_;
  Device device_;
  int micro_batches_, chunks_;
  Placement placement_;
  std::vector<WorkPtr> sends_;
  std::map<std::pair<int, int>, Tensor> activations_here_, gradients_here_;  // (receiving chunk, micro-batch)
};

}  // namespace

DistributedPipeline::DistributedPipeline(nn::ModulePtr stage, std::shared_ptr<ProcessGroup> group,
                                         PipelineOptions options, Device device)
    : DistributedPipeline(std::vector<nn::ModulePtr>{std::move(stage)}, std::move(group), options, device) {}

DistributedPipeline::DistributedPipeline(std::vector<nn::ModulePtr> chunks, std::shared_ptr<ProcessGroup> group,
                                         PipelineOptions options, Device device)
    : chunks_(std::move(chunks)), group_(std::move(group)), options_(options), device_(device) {
  LOOM_CHECK(group_ && !chunks_.empty(), "DistributedPipeline: needs a stage and a process group");
  for (const auto& chunk : chunks_) LOOM_CHECK(chunk, "DistributedPipeline: needs a stage and a process group");
  LOOM_CHECK(static_cast<int>(chunks_.size()) == options.chunks, "DistributedPipeline: got ", chunks_.size(),
             " chunks for options.chunks = ", options.chunks);
  LOOM_CHECK(options.chunks == 1 || group_->size() >= 2, "DistributedPipeline: ", options.chunks,
             " chunks a rank need at least two ranks");
  // With several chunks, messages go both ways between two ranks (the
  // interleaved ring, the V), and an activation's header receive must not
  // wait for this rank's earlier sends (docs/comm.md, Semantics).
  LOOM_CHECK(options.chunks == 1 || group_->backend().find("nccl") == std::string::npos,
             "DistributedPipeline: ", options.chunks, " chunks a rank (", schedule_name(options.schedule),
             ") need a group whose sends finish on their own (mpi, threads, host staging over either); a ",
             group_->backend(), " group finishes them in issue order");
  const int most = kMaxMessages / options.chunks;
  LOOM_CHECK(options.micro_batches >= 1 && options.micro_batches <= most,
             "DistributedPipeline: micro_batches must be in [1, ", most, "], got ", options.micro_batches);
  rank_ = group_->rank();
  stages_ = group_->size();
  placement_ = placement_of(options.schedule);
  for (const auto& chunk : chunks_) chunk->to(device_);
  lane_ = trace::lane("stage " + std::to_string(rank_) + " (rank " + std::to_string(rank_) + ")");
  schedule_ = make_schedule(options.schedule, stages_, options.micro_batches, options.chunks, options.part_times);
}

DistributedPipeline::DistributedPipeline(nn::ModulePtr stage, std::shared_ptr<ProcessGroup> group,
                                         std::shared_ptr<ProcessGroup> data_group, PipelineOptions options,
                                         Device device)
    : DistributedPipeline(std::vector<nn::ModulePtr>{std::move(stage)}, std::move(group), std::move(data_group),
                          options, device) {}

DistributedPipeline::DistributedPipeline(std::vector<nn::ModulePtr> chunks, std::shared_ptr<ProcessGroup> group,
                                         std::shared_ptr<ProcessGroup> data_group, PipelineOptions options,
                                         Device device)
    : DistributedPipeline(std::move(chunks), std::move(group), options, device) {
  // A reducer per chunk: each averages a bucket once every gradient in it is
  // ready in its chunk's last backward (B or W), and each (chunk,
  // micro-batch) runs a backward of its own.
  LOOM_CHECK(data_group, "DistributedPipeline: no data group");
  NoGradGuard no_grad;
  WorkPtr last;
  for (const auto& chunk : chunks_) {
    TensorList params;
    std::vector<std::string> names;
    for (const auto& [name, p] : chunk->named_parameters()) {
      last = data_group->broadcast(p, 0);
      if (!p.requires_grad()) continue;
      params.push_back(p);
      names.push_back(name);
    }
    for (const Tensor& b : chunk->buffers()) last = data_group->broadcast(b, 0);
    // A chunk with nothing to train (a ReLU between cuts) has nothing to average.
    data_reducers_.push_back(params.empty() ? nullptr : Reducer::create(params, names, data_group, {}));
  }
  if (last) last->wait();
}

TensorList DistributedPipeline::parameters() const { return parameters_of(chunks_); }

Tensor DistributedPipeline::train_step(const Tensor& x, const Tensor& y, const LossFn& loss) {
  const int m = options_.micro_batches;
  const bool first = rank_ == 0, last = rank_ == loss_rank();
  TensorList inputs, targets;
  if (first) inputs = split_micro_batches(x, m, "DistributedPipeline (rank 0's inputs)");
  if (last) targets = split_micro_batches(y, m, "DistributedPipeline (the loss rank's targets)");
  std::vector<Tensor> losses(last ? m : 0);

  StageTask task{.chunks = {}, .device = device_, .lane = lane_};
  for (const auto& chunk : chunks_) task.chunks.push_back(*chunk);
  if (!data_reducers_.empty())  // a chunk's last backward averages what its micro-batches accumulated
    task.before_backward = [this](int chunk, bool last_backward) {
      if (data_reducers_[chunk]) data_reducers_[chunk]->prepare_for_backward(last_backward);
    };
  if (first) task.first.emplace(FirstStage{inputs});
  if (last) task.last.emplace(LastStage{targets, loss, y.size(0), losses});
  GroupLinks links(*group_, device_, m, options_.chunks, placement_, lane_);
  const Stopwatch watch;
  task.step_start = watch.started();
  stats_ = run_stage(actions(), task, links);
  links.wait_for_sends();
  step_seconds_ = watch.seconds();
  stats_.idle_fraction = std::max(0.0, 1 - stats_.busy_seconds / step_seconds_);
  return last ? sum_losses(losses) : Tensor();
}

std::string DistributedPipeline::timeline(int width) const {
  LOOM_CHECK(stats_.passes.size() == actions().size(), "DistributedPipeline::timeline: no train_step to draw yet");
  // Each rank's step seconds, then a (pass, micro-batch, chunk, start, end) row per pass.
  constexpr int kFields = 5;
  std::vector<double> mine{step_seconds_};
  for (const PassTime& t : stats_.passes)
    mine.insert(mine.end(), {static_cast<double>(t.action.pass), static_cast<double>(t.action.micro_batch),
                             static_cast<double>(t.action.chunk), t.start, t.end});
  std::vector<Tensor> all;
  for (int r = 0; r < stages_; ++r)
    all.push_back(empty({1 + kFields * static_cast<int64_t>(schedule_[r].size())}, {.dtype = kFloat64, .device = device_}));
  group_->all_gather(all, from_vector(mine).to(device_))->wait();
  if (rank_ != 0) return "";
  std::vector<std::vector<PassTime>> passes(stages_);
  double step = 0;
  for (int r = 0; r < stages_; ++r) {
    const std::vector<double> v = all[r].to_vector<double>();
    step = std::max(step, v[0]);
    for (size_t i = 1; i + kFields <= v.size(); i += kFields)
      passes[r].push_back({{static_cast<Pass>(v[i]), static_cast<int>(v[i + 1]), static_cast<int>(v[i + 2])},
                           v[i + 3], v[i + 4]});
  }
  return parallel::timeline(passes, step, width);
}

Tensor DistributedPipeline::forward(const Tensor& x) {
  NoGradGuard no_grad;
  const int m = options_.micro_batches, last_chunk = static_cast<int>(chunks_.size()) - 1;
  const bool first = rank_ == 0, last = rank_ == loss_rank();
  TensorList inputs;
  if (first) inputs = split_micro_batches(x, m, "DistributedPipeline::forward (rank 0's inputs)");
  GroupLinks links(*group_, device_, m, options_.chunks, placement_, lane_);
  TensorList outputs;
  // Chunk by chunk: sends do not wait, so a chunk c + 1 finds the chunk c
  // outputs it needs on their way (or, at the V's turn, here).
  for (int c = 0; c <= last_chunk; ++c)
    for (int mb = 0; mb < m; ++mb) {
      Tensor out = chunks_[c]->forward(first && c == 0 ? inputs[mb].to(device_) : links.receive_activation(c, mb));
      if (last && c == last_chunk)
        outputs.push_back(out);
      else
        links.send_activation(c, mb, out);
    }
  links.wait_for_sends();
  return last ? cat(outputs, 0) : Tensor();
}

}  // namespace loom::parallel
