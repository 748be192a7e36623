#include "tensor/storage.h"

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

Storage::~Storage() {
  if (allocator_ && data_) allocator_->deallocate(data_, nbytes_);
}

}  // namespace loom
