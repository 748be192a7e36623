// CUDA streams: the queues that every CUDA kernel and copy of loom goes on.
//
// Each thread has, per device, a *current stream*; every op on that device
// enqueues there and returns without waiting. It starts as the device's
// default stream, which loom creates (non-blocking) on first use and which all
// threads share; StreamGuard switches it for a scope. Work on two streams may
// run concurrently: order it with an Event (event.h).
//
//   using namespace loom::cuda;
//   Stream side = Stream::from_pool(0);
//   Tensor y;
//   {
//     StreamGuard guard(side);            // ops on cuda:0 in this scope go on `side`
//     y = x.matmul(w);
//   }
//   Event done;
//   done.record(side);
//   done.wait(current_stream(0));          // later work on the default stream waits for y
//   record_stream(y, current_stream(0));   // see caching_allocator.h: y is used off its stream
//
// Why a created non-blocking stream rather than CUDA's legacy default stream:
// the legacy stream implicitly waits for (and blocks) every other blocking
// stream, which would serialise DataParallel replicas and a DataLoader's copy
// stream with the compute stream, and hide missing Event dependencies in tests.
// Code outside loom that uses the legacy stream (plain cudaMemcpy) is not
// ordered with loom's work: call synchronize() first.
#pragma once

#include <cstdint>
#include <string>

struct CUstream_st;  // cudaStream_t is CUstream_st*; this header needs no CUDA headers

namespace loom::cuda {

class Stream {
 public:
  // Wraps an existing stream of `device` (e.g. one made by another library);
  // loom does not destroy it, and it must outlive every use loom makes of it.
  Stream(int device, CUstream_st* handle) : device_(device), handle_(handle) {}

  // The stream every thread starts with on `device`.
  static Stream default_stream(int device);
  // One of a fixed pool of streams of `device`, handed out round-robin. The
  // pool's streams are never destroyed, so memory cached for one of them can
  // never be handed to an unrelated stream that reused its handle.
  static Stream from_pool(int device);
  // The stream kept for one purpose on `device` ("host staging", "batch
  // copies"): the same stream on every call, so that the work of that
  // purpose is ordered on it; a dedicated one, never a pool stream that
  // a DataParallel replica or pipeline stage could also be queueing on.
  static Stream for_purpose(int device, const std::string& purpose);
  // A new stream of `device` that is handed to nothing else: for work that
  // must not queue behind, or ahead of, unrelated work, such as NCCL kernels,
  // which wait for their peers. Never destroyed either (a tensor used on it
  // may die later, and its block then waits for an event recorded on it), so
  // make one per long-lived purpose, not one per operation.
  static Stream dedicated(int device);

  int device() const { return device_; }
  CUstream_st* handle() const { return handle_; }

  // Blocks until all work queued on the stream is done; reports an
  // out-of-range index that a kernel found (a loom::Error naming the op).
  void synchronize() const;
  // True when all work queued on the stream is done; never blocks.
  bool query() const;

  bool operator==(const Stream& o) const { return device_ == o.device_ && handle_ == o.handle_; }
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  int device_;
  CUstream_st* handle_;
};

// The calling thread's current stream on `device`.
Stream current_stream(int device);
// Makes `stream` the calling thread's current stream on its device.
void set_current_stream(const Stream& stream);

// Sets the current stream of stream.device() for a scope, then restores it.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

}  // namespace loom::cuda
