// WorkerPool: a fixed set of threads that run one task each, together.
//
// DataParallel keeps one worker per replica for its whole life, so that a
// training step starts no threads. Each worker has its own autograd tape,
// grad mode and autocast scope (all thread-local; a task runs under the
// caller's grad mode and autocast) and its own share of the OpenMP threads.
//
//   WorkerPool pool(3);
//   pool.run([&](int i) { outputs[i] = replicas[i]->forward(inputs[i]); });  // waits for all three
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tensor/dtype.h"

namespace loom::parallel {

class WorkerPool {
 public:
  // `threads_per_worker` OpenMP threads each (0: the machine's cores shared out evenly).
  explicit WorkerPool(int workers, int threads_per_worker = 0);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs task(i) on worker i for i < count (default: all), in parallel, and
  // returns when all have finished. The caller's grad mode and autocast
  // apply in the workers. The first exception thrown by a task is rethrown here.
  void run(const std::function<void(int)>& task, int count = -1);

 private:
  void loop(int index, int omp_threads);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int count_ = 0;
  bool grad_enabled_ = true;
  std::optional<DType> autocast_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace loom::parallel
