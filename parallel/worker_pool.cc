#include "parallel/worker_pool.h"

#include <omp.h>

#include <algorithm>

#include "autograd/grad_mode.h"
#include "tensor/autocast.h"

namespace loom::parallel {

WorkerPool::WorkerPool(int workers, int threads_per_worker) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int omp_threads = threads_per_worker > 0 ? threads_per_worker : std::max(1, cores / std::max(1, workers));
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i, omp_threads] { loop(i, omp_threads); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::run(const std::function<void(int)>& task, int count) {
  std::unique_lock<std::mutex> lock(mutex_);
  task_ = &task;
  count_ = count < 0 ? size() : std::min(count, size());
  pending_ = count_;
  grad_enabled_ = autograd::grad_enabled();
  autocast_ = autocast_dtype();  // a replica or stage under the caller's autocast computes in its dtypes
  error_ = nullptr;
  ++generation_;
  start_.notify_all();
  done_.wait(lock, [this] { return pending_ == 0; });
  task_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void WorkerPool::loop(int index, int omp_threads) {
  omp_set_num_threads(omp_threads);  // this thread's OpenMP team size
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    if (index >= count_) continue;
    const std::function<void(int)>* task = task_;
    const bool grad = grad_enabled_;
    const std::optional<DType> autocast = autocast_;
    lock.unlock();
    std::exception_ptr error;
    try {
      autograd::set_grad_enabled(grad);
      AutocastGuard as_the_caller(autocast);
      (*task)(index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_.notify_all();
  }
}

}  // namespace loom::parallel
