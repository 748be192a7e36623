#include "parallel/comm/work.h"

#include "tensor/error.h"

namespace loom::parallel {

void Work::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  completed_cv_.wait(lock, [&] { return completed_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !error_;
}

void Work::mark_completed(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    LOOM_INTERNAL_ASSERT(!completed_, "Work completed twice");
    completed_ = true;
    error_ = std::move(error);
  }
  completed_cv_.notify_all();
}

}  // namespace loom::parallel
