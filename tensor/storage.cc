#include "tensor/storage.h"

#include "tensor/error.h"

namespace loom {

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(&allocator_for(device)) {
  data_ = nbytes > 0 ? allocator_->allocate(nbytes) : nullptr;
}

Storage::Storage(size_t nbytes, Device device, Allocator& allocator)
    : nbytes_(nbytes), device_(device), allocator_(&allocator) {
  data_ = nbytes > 0 ? allocator_->allocate(nbytes) : nullptr;
}

Storage::Storage(void* data, size_t nbytes, Device device)
    : data_(data), nbytes_(nbytes), device_(device) {}

void Storage::release() {
  LOOM_CHECK(allocator_ != nullptr, "Storage::release: the storage does not own its memory");
  if (released_) return;
  if (data_) allocator_->deallocate(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::reallocate() {
  if (!released_) return;
  data_ = nbytes_ > 0 ? allocator_->allocate(nbytes_) : nullptr;
  released_ = false;
}

Storage::~Storage() {
  if (allocator_ && data_) allocator_->deallocate(data_, nbytes_);
}

}  // namespace loom
