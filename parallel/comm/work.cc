#include "parallel/comm/work.h"

#include "tensor/error.h"

namespace loom::parallel {

void Work::wait() {
  std::function<void()> order;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    completed_cv_.wait(lock, [&] { return completed_; });
    if (failed_) throw Error(error_);
    order = order_device_work_;
  }
  if (order) order();
}

void Work::set_device_ordering(std::function<void()> order_device_work) {
  std::lock_guard<std::mutex> lock(mutex_);
  order_device_work_ = std::move(order_device_work);
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !failed_;
}

std::chrono::steady_clock::time_point Work::completed_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_at_;
}

void Work::mark_completed(std::exception_ptr error) {
  std::string message;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
      message = "unknown error";
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    LOOM_INTERNAL_ASSERT(!completed_, "Work completed twice");
    completed_ = true;
    completed_at_ = std::chrono::steady_clock::now();
    failed_ = error != nullptr;
    error_ = std::move(message);
  }
  completed_cv_.notify_all();
}

}  // namespace loom::parallel
