// The memory behind one or more tensors (a tensor and all its views share it).
//
// Storage owns `nbytes` bytes on `device`, returned to `allocator` when the
// last tensor using it dies. It also carries the version counter that in-place
// ops bump, which autograd uses to detect saved tensors modified after saving.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tensor/allocator.h"
#include "tensor/device.h"

namespace loom {

class Storage {
 public:
  // Allocates nbytes from the device's allocator.
  Storage(size_t nbytes, Device device);
  // Allocates nbytes from `allocator` (e.g. pinned host memory for a CPU tensor).
  Storage(size_t nbytes, Device device, Allocator& allocator);
  // Wraps memory loom does not own (it is not freed).
  Storage(void* data, size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // The allocator that owns the memory; null when it is not owned.
  Allocator* allocator() const { return allocator_; }

  // Frees the memory while the storage (and every view of it) lives on, and
  // brings new memory back, contents undefined: FSDP frees a unit's gathered
  // parameters between uses and gathers them again into the same storage, so
  // that the parameters and what autograd saved of them see them again.
  // Reading a released storage is an error (Tensor::raw_data checks).
  void release();
  void reallocate();
  bool released() const { return released_; }

  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null: not owned
  bool released_ = false;
  std::atomic<uint32_t> version_{0};
};

}  // namespace loom
