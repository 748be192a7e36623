#include "data/prefetcher.h"

#include <omp.h>

#include "tensor/error.h"

namespace loom::data {

BatchPrefetcher::BatchPrefetcher(BuildFn build, int64_t num_batches, int num_workers, int capacity)
    : build_(std::move(build)), num_batches_(num_batches), capacity_(capacity) {
  LOOM_CHECK(num_batches >= 0, "BatchPrefetcher: negative number of batches ", num_batches);
  LOOM_CHECK(num_workers >= 1, "BatchPrefetcher: needs at least one worker, got ", num_workers);
  LOOM_CHECK(capacity >= 1, "BatchPrefetcher: capacity must be at least 1, got ", capacity);
  slots_.resize(static_cast<size_t>(capacity));
  try {
    for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { work(); });
  } catch (...) {  // a thread failed to start: do not leave the others running
    stop_and_join();
    throw;
  }
}

BatchPrefetcher::~BatchPrefetcher() { stop_and_join(); }

void BatchPrefetcher::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  room_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
}

void BatchPrefetcher::work() {
  // The workers already use the cores; an OpenMP team inside each one's ops
  // would oversubscribe them. This sets the calling thread's team size only.
  omp_set_num_threads(1);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    // Claim batch k only when its slot is free: batch k - capacity was taken.
    room_.wait(lock, [&] {
      return stopping_ || next_to_build_ >= num_batches_ ||
             next_to_build_ < next_to_take_ + capacity_;
    });
    if (stopping_ || next_to_build_ >= num_batches_) return;
    const int64_t k = next_to_build_++;
    lock.unlock();
    Slot done;
    try {
      done.batch = build_(k);
    } catch (...) {
      done.error = std::current_exception();
    }
    done.ready = true;
    lock.lock();
    slots_[static_cast<size_t>(k % capacity_)] = std::move(done);
    ready_.notify_all();
  }
}

Batch BatchPrefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  LOOM_CHECK(next_to_take_ < num_batches_, "BatchPrefetcher: all ", num_batches_,
             " batches were already taken");
  Slot& slot = slots_[static_cast<size_t>(next_to_take_ % capacity_)];
  ready_.wait(lock, [&] { return slot.ready; });
  Slot taken = std::move(slot);
  slot = Slot{};
  ++next_to_take_;
  lock.unlock();
  room_.notify_all();
  if (taken.error) std::rethrow_exception(taken.error);
  return std::move(taken.batch);
}

}  // namespace loom::data
