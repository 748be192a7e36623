#include "parallel/pipeline/mailbox.h"

namespace loom::parallel {

void Mailbox::put(int key, Tensor value) {
  DeviceMark made = DeviceMark::here(value.device());  // the end of the sender's queue: the value is made there
  {
    std::lock_guard<std::mutex> lock(mutex_);
    items_[key] = {std::move(value), std::move(made)};
  }
  ready_.notify_all();
}

Tensor Mailbox::take(int key) {
  Item item;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return !failure_.empty() || items_.count(key) > 0; });
    LOOM_CHECK(failure_.empty(), "pipeline: stopped waiting for micro-batch ", key, " because ", failure_);
    item = std::move(items_[key]);
    items_.erase(key);
  }
  item.made.wait_here();  // the receiver's queue runs after the sender's made it
  used_here(item.value);
  return item.value;
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
