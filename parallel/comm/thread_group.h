// ThreadGroup: a process group of n ranks inside one process, one thread per
// rank — for tests, for teaching, and for a program started without mpirun.
//
//   auto groups = parallel::ThreadGroup::create(4);   // groups[r] is rank r
//   std::vector<std::thread> threads;
//   for (int r = 0; r < 4; ++r)
//     threads.emplace_back([&, r] { groups[r]->all_reduce(x[r])->wait(); });
//   for (auto& t : threads) t.join();
//
// The ranks meet in shared memory: each rank's communication thread publishes
// a descriptor and its tensors' addresses, and every rank reads the others'
// tensors directly. all_reduce is a reduce-scatter followed by an all-gather:
// rank r reduces slice r of every rank's tensor into its own tensor, then each
// rank copies the other slices from their owners. Sends copy the tensor into a
// mailbox and complete at once; a recv takes the oldest message from its
// (src, tag) mailbox.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/op_queue.h"
#include "parallel/comm/process_group.h"

namespace loom::parallel {

class ThreadGroup : public ProcessGroup {
 public:
  // `size` groups that form one job: element r is rank r, to be used by its
  // own thread. Destroy them after their operations have finished; a
  // destroyed rank makes its peers' collectives fail instead of waiting.
  static std::vector<std::shared_ptr<ProcessGroup>> create(int size,
                                                           ProcessGroupOptions options = {});
  ~ThreadGroup() override;

  std::string backend() const override { return "threads"; }

 protected:
  bool supports(Device device) const override { return device.is_cpu(); }
  void enqueue(OpPtr op) override { queue_.push(std::move(op)); }
  std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members, int new_rank,
                                              int64_t id) override;

 private:
  struct Shared;  // what the ranks of one job share: slots, mailboxes, the barrier
  using Clock = std::chrono::steady_clock;

  ThreadGroup(int rank, std::shared_ptr<Shared> shared, ProcessGroupOptions options);
  void run();  // the communication thread
  void execute(const Op& op, Clock::time_point deadline);
  void collective(const Op& op, Clock::time_point deadline);
  void send(const Op& op);
  void recv(const Op& op, Clock::time_point deadline);
  // Waits until every rank has reached this point of the current collective.
  void meet(const Op& op, Clock::time_point deadline);
  [[noreturn]] void fail_group(std::unique_lock<std::mutex>& lock);

  std::shared_ptr<Shared> shared_;
  OpQueue queue_;
  std::thread thread_;
};

}  // namespace loom::parallel
