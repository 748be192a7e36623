// Device memory for CUDA tensors: one caching allocator per GPU.
//
// cudaMalloc is slow and cudaFree waits for the whole device, so loom calls
// them rarely. Requests are rounded up (to 512 bytes; small ones are carved
// out of 2 MiB segments, mid-sized ones out of 20 MiB segments, large ones get
// a segment of their own rounded to 2 MiB); a freed block goes back to a free
// list and is split, reused and merged with free neighbours for later
// requests. Memory stays cached until empty_cache() (or until a cudaMalloc
// fails, when the cache is emptied and the cudaMalloc tried once more; if
// that fails too, loom::Error gives the request and the statistics). That
// bookkeeping is BlockPool's (block_pool.h), apart from CUDA so that the CPU
// tests run it; this file gives it cudaMalloc, cudaFree and events.
//
// LOOM_CUDA_NO_CACHING=1 in the environment turns caching off (a cudaMalloc
// and cudaFree per tensor), so that compute-sanitizer sees every tensor's
// bounds; tools/gpu_run.sh --sanitize sets it.
//
// Blocks belong to the stream that was current when they were allocated. A
// freed block is reused at once by later work on that stream (the stream's
// own order makes that safe), but not by other streams. If a tensor is used
// on another stream too, say so with record_stream(): its block then waits,
// after the tensor dies, until the work queued so far on that stream is done.
//
//   Tensor x = randn({1024, 1024}, {.device = Device::cuda(0)});
//   MemoryStats s = memory_stats(Device::cuda(0));   // allocated, reserved, peak, cudaMalloc calls
//   {
//     cuda::StreamGuard guard(side);
//     y = x * 2;                        // reads x on `side`
//   }
//   cuda::record_stream(x, side);       // x may die before `side` has read it
//   empty_cache(Device::cuda(0));       // cached blocks back to CUDA
#pragma once

#include "tensor/allocator.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"

#include <vector>

namespace loom::cuda {

// The allocator of cuda:device: what allocator_for(Device::cuda(device)) returns.
Allocator& device_allocator(int device);

// Records that work queued on `stream` uses t's memory, so that the memory is
// not handed out again before that work is done.
void record_stream(const Tensor& t, const Stream& stream);

// A CUDA graph's capture on `stream` (graph.cc): the blocks allocated on it
// are the graph's private pool (block_pool.h says how). end_capture returns
// the blocks from outside that pool that were released during the capture;
// release_after_replays gives them back once the work queued on `replay`
// (the graph's replays) is done.
void begin_capture(int device, const Stream& stream);
std::vector<void*> end_capture(int device);
void release_after_replays(int device, const std::vector<void*>& kept, const Stream& replay);

}  // namespace loom::cuda
