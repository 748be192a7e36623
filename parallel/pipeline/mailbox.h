// Mailbox: tensors passed between two pipeline stages, keyed by micro-batch.
// take() blocks until the sender has put that micro-batch; if any stage has
// failed, it throws instead, so a failure never leaves the others waiting.
// On a GPU, where each stage works on a queue of its own, a tensor travels
// with a mark of the sender's queue, and the receiver's queue waits for it.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "tensor/device_queue.h"
#include "tensor/tensor.h"

namespace loom::parallel {

class Mailbox {
 public:
  void put(int key, Tensor value);
  Tensor take(int key);
  // Wakes every waiting take() with an error.
  void fail(const std::string& why);
  void reset();

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  struct Item {
    Tensor value;
    DeviceMark made;
  };
  std::map<int, Item> items_;
  std::string failure_;
};

}  // namespace loom::parallel
