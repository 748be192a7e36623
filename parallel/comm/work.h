// Work: the handle an asynchronous communication operation returns.
//
//   parallel::WorkPtr work = pg->all_reduce(grad);   // returns at once
//   ... compute something else ...
//   work->wait();                                    // rethrows the failure, if any
//
// A process group finishes its collectives in the order they were issued,
// so when a collective's Work is completed, so are all operations issued
// before it. No operation waits for an earlier send's receiver: MPI finishes
// a send or receive as soon as its own message has gone or arrived (perhaps
// before earlier operations), host staging finishes sends on their own, and
// the threads group's sends are done once their message is copied.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace loom::parallel {

class Work {
 public:
  // Blocks until the operation has finished. Throws its loom::Error if it
  // failed (again on every call). Never blocks forever: a group fails an
  // operation that does not finish within its timeout.
  void wait();
  // True once the operation has finished, successfully or not.
  bool is_completed() const;
  // True once the operation has finished without error.
  bool is_success() const;
  // When the operation finished (steady clock); meaningful once completed.
  // Tracing uses it to draw a collective's span on the communication lane.
  std::chrono::steady_clock::time_point completed_at() const;

  // Called once by the process group that ran the operation, on its thread.
  void mark_completed(std::exception_ptr error = nullptr);
  // For operations whose results reach a GPU asynchronously (host staging):
  // set before mark_completed, it runs in every successful wait() on the
  // waiting thread, and makes that thread's device stream wait for the
  // results (the host does not wait for the GPU).
  void set_device_ordering(std::function<void()> order_device_work);

 private:
  mutable std::mutex mutex_;
  std::condition_variable completed_cv_;
  bool completed_ = false;
  std::chrono::steady_clock::time_point completed_at_;
  // The failure's message. wait() throws a fresh loom::Error with it rather
  // than rethrowing the original object, which would then be shared between
  // the communication thread and every waiting thread.
  bool failed_ = false;
  std::string error_;
  std::function<void()> order_device_work_;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace loom::parallel
