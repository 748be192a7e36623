#include "parallel/sharding/zero.h"

#include <algorithm>
#include <deque>
#include <map>

#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {

// Where each gradient goes and when its bucket is reduce-scattered. Stage 1:
// the parameters' gradients are views of a flat gradient per bucket, kept
// across steps, reduced in place by step(). Stage 2: a bucket's flat gradient
// exists only while its gradients arrive and its reduce-scatter runs; the
// result lands in a buffer the size of the rank's piece.
struct ZeroRedundancyOptimizer::Gradients {
  static constexpr size_t kMaxInFlight = 2;  // stage 2: full buckets alive at once

  int stage = 1;
  std::shared_ptr<ProcessGroup> group;
  TensorList params;
  std::vector<Bucket> buckets;
  std::vector<Pieces> pieces;
  TensorList flat_params;
  // Per parameter.
  std::vector<size_t> bucket_of;
  std::vector<int64_t> offset_of;  // in its bucket
  std::vector<bool> arrived;       // stage 2: this step
  // Per bucket.
  std::vector<size_t> pending;  // stage 2: gradients not yet in
  TensorList flat;              // the full gradient
  TensorList shard_grad;        // this rank's piece of the mean gradient
  std::vector<WorkPtr> works;
  size_t next = 0;               // buckets are launched in order, the same on every rank
  std::deque<size_t> in_flight;  // stage 2: launched, their flat gradients still alive

  Tensor slot(size_t k) const {
    return flat[bucket_of[k]].narrow(0, offset_of[k], params[k].numel()).view(params[k].shape().vec());
  }
  Tensor flat_grad(size_t b) {
    if (!flat[b].defined()) flat[b] = zeros_like(flat_params[b]);
    return flat[b];
  }

  // Stage 1: the gradient moves into its slot and the slot becomes the
  // gradient, so a further backward accumulates there (as DDP's
  // gradient_as_bucket_view) and autograd's own tensor is freed at once.
  void keep_in_slot(size_t k) {
    const Tensor grad = params[k].grad();
    const Tensor view = slot(k);
    if (!grad.defined()) {
      view.zero_();  // no gradient this step: it contributes zeros
    } else if (grad.impl() != view.impl()) {
      view.copy_(grad);
      params[k].set_grad(view);
    }
  }

  // Stage 2: the gradient is copied into the bucket and dropped.
  void scatter_as_it_comes(size_t k) {
    LOOM_CHECK(!arrived[k], "ZeroRedundancyOptimizer (stage 2): parameter ", k,
               " received a gradient twice before step(); stage 2 reduces each backward's gradients as they "
               "come, so it takes one backward per step (use stage 1 to accumulate gradients)");
    arrived[k] = true;
    const size_t b = bucket_of[k];
    flat_grad(b).narrow(0, offset_of[k], params[k].numel()).copy_(params[k].grad().reshape({-1}));
    params[k].set_grad(Tensor());
    --pending[b];
    while (next < buckets.size() && pending[next] == 0) launch(next++);
  }

  void launch(size_t b) {
    if (stage == 2) {
      while (in_flight.size() >= kMaxInFlight) finish(in_flight.front());
      in_flight.push_back(b);
    }
    works[b] = group->reduce_scatter(shard_grad[b], flat_grad(b), ReduceOp::Avg);
  }

  void finish(size_t b) {
    works[b]->wait();
    works[b].reset();
    if (stage == 2) {
      flat[b] = Tensor();
      in_flight.erase(std::find(in_flight.begin(), in_flight.end(), b));
    }
  }

  // Every bucket's reduce-scatter launched (stage 2: those whose gradients
  // did not all come, with zeros for the missing) and finished.
  void reduce_all() {
    if (stage == 1)
      for (size_t k = 0; k < params.size(); ++k) keep_in_slot(k);
    while (next < buckets.size()) launch(next++);
    for (size_t b = 0; b < buckets.size(); ++b)
      if (works[b]) finish(b);
    next = 0;
    std::fill(arrived.begin(), arrived.end(), false);
    for (size_t b = 0; b < buckets.size(); ++b) pending[b] = buckets[b].size();
  }
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(TensorList params, std::shared_ptr<ProcessGroup> group,
                                                 MakeOptimizer make, ZeroOptions options)
    : Optimizer(params, 0), group_(std::move(group)), options_(options) {
  LOOM_CHECK(group_, "ZeroRedundancyOptimizer: no process group");
  LOOM_CHECK(options.stage == 1 || options.stage == 2, "ZeroRedundancyOptimizer: stage must be 1 or 2, got ",
             options.stage, options.stage == 3 ? " (FSDP shards the parameters too)" : "");
  LOOM_CHECK(options.bucket_cap_bytes > 0, "ZeroRedundancyOptimizer: bucket_cap_bytes must be positive, got ",
             options.bucket_cap_bytes);
  LOOM_CHECK(!params.empty(), "ZeroRedundancyOptimizer: no parameters");
  const int n = group_->size(), rank = group_->rank();
  NoGradGuard no_grad;

  auto g = std::make_shared<Gradients>();
  g->stage = options.stage;
  g->group = group_;
  g->params = params;
  g->bucket_of.resize(params.size());
  g->offset_of.resize(params.size());
  g->arrived.assign(params.size(), false);
  buckets_ = plan_buckets(params, options.bucket_cap_bytes);
  WorkPtr last;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Tensor flat = flatten_as_views(params, buckets_[b]);
    last = group_->broadcast(flat, 0);  // every rank starts from rank 0's parameters
    const std::vector<int64_t> offsets = flat_offsets(params, buckets_[b]);
    for (size_t i = 0; i < buckets_[b].size(); ++i) {
      g->bucket_of[buckets_[b][i]] = b;
      g->offset_of[buckets_[b][i]] = offsets[i];
    }
    const Pieces& pieces = pieces_.emplace_back(flat.numel(), n);
    const int64_t at = pieces.start(rank), size = pieces.size(rank);
    shard_.push_back(flat.narrow(0, at, size).requires_grad_());
    if (options.stage == 1) {
      g->flat.push_back(zeros_like(flat));
      g->shard_grad.push_back(g->flat.back().narrow(0, at, size));  // reduced in place
    } else {
      g->flat.push_back(Tensor());
      g->shard_grad.push_back(empty({size}, flat.options()));
    }
    flat_params_.push_back(flat);
  }
  if (last) last->wait();
  g->buckets = buckets_;
  g->pieces = pieces_;
  g->flat_params = flat_params_;
  g->pending.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) g->pending[b] = buckets_[b].size();
  g->works.resize(buckets_.size());
  grads_ = g;

  inner_ = make(shard_);
  LOOM_CHECK(inner_ != nullptr, "ZeroRedundancyOptimizer: `make` returned no optimizer");
  set_lr(inner_->lr());

  // Each gradient leaves autograd's own tensor as soon as it is accumulated.
  std::weak_ptr<Gradients> weak = grads_;
  for (size_t k = 0; k < params.size(); ++k)
    params[k].register_post_accumulate_grad_hook([weak, k](const Tensor&) {
      if (auto grads = weak.lock()) {
        NoGradGuard no_grad;
        if (grads->stage == 1)
          grads->keep_in_slot(k);
        else
          grads->scatter_as_it_comes(k);
      }
    });
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  // 1. Each rank gets the mean gradient of its pieces.
  grads_->reduce_all();
  for (size_t b = 0; b < shard_.size(); ++b) shard_[b].set_grad(grads_->shard_grad[b]);
  // 2. It steps them, in place in the flat parameters.
  inner_->set_lr(lr());
  inner_->step();
  // 3. Every rank gathers every piece.
  std::vector<WorkPtr> gathers;
  for (size_t b = 0; b < flat_params_.size(); ++b)
    gathers.push_back(group_->all_gather(flat_params_[b], shard_[b].detach()));
  for (const WorkPtr& gather : gathers) gather->wait();
}

nn::NamedTensors ZeroRedundancyOptimizer::state_dict() const {
  auto scalar = [](int64_t v) { return full({}, static_cast<double>(v), {.dtype = kInt64}); };
  nn::NamedTensors out{{"zero.rank", scalar(group_->rank())},
                       {"zero.ranks", scalar(group_->size())},
                       {"zero.shard_numel", scalar(shard_numel())}};
  for (auto& [key, t] : inner_->state_dict()) out.emplace_back("shard." + key, t);
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const nn::NamedTensors& state) {
  std::map<std::string, int64_t> where;
  nn::NamedTensors inner;
  for (const auto& [key, t] : state) {
    if (key.compare(0, 5, "zero.") == 0) {
      LOOM_CHECK(t.numel() == 1 && !is_floating(t.dtype()), "ZeroRedundancyOptimizer state: '", key,
                 "' must be an integer scalar");
      where[key] = t.item<int64_t>();
    } else {
      LOOM_CHECK(key.compare(0, 6, "shard.") == 0, "ZeroRedundancyOptimizer state: unexpected entry '", key,
                 "' (a plain optimizer's state? ZeRO saves each rank's shard)");
      inner.emplace_back(key.substr(6), t);
    }
  }
  for (const char* key : {"zero.rank", "zero.ranks", "zero.shard_numel"})
    LOOM_CHECK(where.count(key), "ZeroRedundancyOptimizer state: '", key, "' is missing");
  LOOM_CHECK(where["zero.ranks"] == group_->size() && where["zero.rank"] == group_->rank(),
             "ZeroRedundancyOptimizer state: saved by rank ", where["zero.rank"], " of ", where["zero.ranks"],
             ", loaded by rank ", group_->rank(), " of ", group_->size(),
             "; each rank loads its own shard's state at the same world size");
  LOOM_CHECK(where["zero.shard_numel"] == shard_numel(), "ZeroRedundancyOptimizer state: the saved shard has ",
             where["zero.shard_numel"], " elements, this rank's has ", shard_numel(), " (another model?)");
  inner_->load_state_dict(inner);
  set_lr(inner_->lr());
}

int64_t ZeroRedundancyOptimizer::shard_numel() const {
  int64_t n = 0;
  for (const Tensor& t : shard_) n += t.numel();
  return n;
}

int64_t ZeroRedundancyOptimizer::numel() const {
  int64_t n = 0;
  for (const Tensor& t : flat_params_) n += t.numel();
  return n;
}

}  // namespace loom::parallel
