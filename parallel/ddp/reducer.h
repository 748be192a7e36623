// The Reducer: the part of DistributedDataParallel that averages gradients
// across ranks while backward runs (PyTorch's c10d Reducer, in miniature).
//
// Each forward arms it (prepare_for_backward). During backward every
// parameter's post-accumulate hook copies the fresh gradient into its slot of
// a bucket's flat tensor; the hook that completes a bucket issues that
// bucket's asynchronous all_reduce(Avg) and returns at once, so communication
// overlaps the rest of backward. Buckets are issued strictly in plan order,
// the same on every rank, as collectives must be. When backward has finished
// its last node, a callback waits for the all-reduces and copies the averaged
// values back into the parameters' .grad(). A communication hook
// (comm_hook.h) can replace the all-reduce, to send the bucket in 16 bits.
//
// Not armed (no_sync, or a forward without grad mode), the hooks do nothing
// and gradients simply accumulate locally; the next synchronised backward
// averages the accumulated sums.
//
// With gradient_as_bucket_view, the hook also makes the parameter's .grad()
// its bucket view, so that the all-reduce averages the gradient in place and
// nothing is copied back. While .grad() is that view, backward accumulates
// straight into the bucket and the hook has nothing to copy either (after
// no_sync steps, or when the optimizer zeroes gradients instead of dropping
// them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/ddp/bucket_plan.h"
#include "parallel/ddp/comm_hook.h"

namespace loom::parallel {

struct ReducerStats {
  int64_t synced_backwards = 0;   // backward passes whose gradients were averaged
  int64_t allreduces = 0;         // bucket all-reduces issued
  int64_t bytes = 0;              // bytes each rank contributed to the all-reduces
  double exposed_wait_s = 0;      // time backward's end waited for communication
};

// What DDPOptions passes on (see there).
struct ReducerOptions {
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // `params` all require grad; `names` name them in error messages.
  static std::shared_ptr<Reducer> create(TensorList params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group, ReducerOptions options);

  // Called by each forward: whether the backward that follows synchronises.
  void prepare_for_backward(bool sync);

  // How buckets are averaged from now on (allreduce_hook() to begin with).
  void set_comm_hook(std::shared_ptr<CommHook> hook);
  const CommHook& comm_hook() const { return *hook_; }

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Each bucket's flat tensor, which its all-reduce averages.
  const TensorList& bucket_tensors() const { return flat_; }
  // For each bucket of the last synchronised backward, how many parameter
  // gradients were still to come when its all-reduce was issued. Non-zero
  // values are communication overlapping backward.
  const std::vector<int>& pending_at_launch() const { return pending_at_launch_; }
  ReducerStats stats() const { return stats_; }

 private:
  Reducer(TensorList params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
          ReducerOptions options);
  void install_hooks();
  void on_gradient_ready(size_t param);
  void launch_ready_buckets();
  void wait_for_buckets();
  void finish_backward();
  void reset_step();
  std::string missing_gradients() const;

  struct Slot {
    size_t bucket;
    Tensor view;  // the parameter's place in its bucket's flat tensor, shaped like it
  };

  const TensorList params_;
  const std::vector<std::string> names_;
  const std::shared_ptr<ProcessGroup> group_;
  const bool find_unused_;
  const bool grad_is_view_;  // gradient_as_bucket_view
  std::shared_ptr<CommHook> hook_ = allreduce_hook();
  std::vector<Bucket> buckets_;
  TensorList flat_;           // one contiguous tensor per bucket
  std::vector<Slot> slots_;   // per parameter

  // The state of one backward.
  bool armed_ = false;
  bool callback_queued_ = false;
  std::vector<bool> ready_;         // per parameter
  std::vector<int> pending_;        // per bucket: gradients not yet ready
  int gradients_pending_ = 0;
  size_t next_bucket_ = 0;          // the next bucket to issue
  std::vector<WorkPtr> works_;      // per bucket, once issued
  std::vector<int> pending_at_launch_;
  ReducerStats stats_;
};

}  // namespace loom::parallel
