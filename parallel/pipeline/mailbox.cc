#include "parallel/pipeline/mailbox.h"

namespace loom::parallel {

void Mailbox::put(int key, Tensor value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    items_[key] = std::move(value);
  }
  ready_.notify_all();
}

Tensor Mailbox::take(int key) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return !failure_.empty() || items_.count(key) > 0; });
  LOOM_CHECK(failure_.empty(), "pipeline: stopped waiting for micro-batch ", key, " because ", failure_);
  Tensor value = std::move(items_[key]);
  items_.erase(key);
  return value;
}

void Mailbox::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = why;
  }
  ready_.notify_all();
}

void Mailbox::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  items_.clear();
  failure_.clear();
}

}  // namespace loom::parallel
