// Page-locked host memory: the staging buffers of asynchronous copies.
//
// A copy from pinned memory to the GPU returns at once and runs while the host
// goes on (from pageable memory the driver must first copy through a pinned
// buffer of its own). Like device memory, pinned memory is slow to get
// (cudaHostAlloc), so freed blocks are cached by size. A block that a queued
// copy still reads is not handed out again before that copy is done: copies
// report their use with record_pinned_use().
//
// Users reach it through empty_pinned() (tensor/creation.h).
#pragma once

#include "tensor/allocator.h"

struct CUstream_st;

namespace loom::cuda {

Allocator& pinned_allocator();
// Marks the pinned block that starts at `block` as used by work now queued on
// `stream` (of cuda:device); no-op for memory that is not from this allocator.
void record_pinned_use(void* block, CUstream_st* stream, int device);

}  // namespace loom::cuda
