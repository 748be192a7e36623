// BatchPrefetcher: worker threads that build batches 0..n-1 ahead of a
// consumer that takes them strictly in order (the engine of DataLoader).
//
// Workers claim batch numbers from a shared counter, so which worker builds a
// batch varies from run to run, but the consumer's k-th batch is always batch
// k: the order depends neither on the number of workers nor on timing. At
// most `capacity` batches are being built or waiting ahead of the consumer (a
// bounded queue), so a slow consumer does not make memory grow. An exception
// thrown while building batch k reaches the consumer when it takes batch k.
// The destructor stops the workers (each finishes the batch in hand) and
// joins them, whether or not all batches were taken.
//
//   BatchPrefetcher p([&](int64_t k) { return make_batch(k); }, num_batches,
//                     /*num_workers=*/4, /*capacity=*/8);
//   for (int64_t k = 0; k < num_batches; ++k) train_on(p.next());
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "data/dataset.h"

namespace loom::data {

class BatchPrefetcher {
 public:
  using BuildFn = std::function<Batch(int64_t batch)>;

  // `build` is called from the worker threads, several at once.
  BatchPrefetcher(BuildFn build, int64_t num_batches, int num_workers, int capacity);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The next batch in order: blocks until it is built, and rethrows the
  // exception its build threw, if any.
  Batch next();

 private:
  struct Slot {
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };

  void work();
  void stop_and_join();

  BuildFn build_;
  const int64_t num_batches_;
  const int64_t capacity_;

  std::mutex mutex_;
  std::condition_variable ready_;  // a batch was stored in its slot
  std::condition_variable room_;   // the consumer took a batch, or stop_and_join began
  std::vector<Slot> slots_;        // batch k waits in slots_[k % capacity_]
  int64_t next_to_build_ = 0;
  int64_t next_to_take_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace loom::data
