// OpQueue: the hand-over from the threads that issue operations to the one
// communication thread of a process group that runs them, first in, first out.
//
//   queue.push(op);                        // issuing thread
//   while (OpPtr op = queue.pop()) run(op); // communication thread; null once closed and empty
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>

#include "parallel/comm/op.h"

namespace loom::parallel {

// First in, first out, between threads; T is a pointer type (null: closed).
template <typename T>
class FifoQueue {
 public:
  void push(T op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_one();
  }

  // Waits for the next op; returns null once the queue is closed and empty.
  T pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !ops_.empty() || closed_; });
    return take(lock);
  }

  // The next op, or null when there is none right now.
  T try_pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    return take(lock);
  }

  // Makes pop() return null once the remaining ops are taken.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  T take(std::unique_lock<std::mutex>&) {
    if (ops_.empty()) return nullptr;
    T op = std::move(ops_.front());
    ops_.pop_front();
    return op;
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<T> ops_;
  bool closed_ = false;
};

using OpQueue = FifoQueue<OpPtr>;

}  // namespace loom::parallel
