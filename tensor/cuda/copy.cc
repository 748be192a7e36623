// CUDA copies in every direction: on one GPU, between GPUs, host to device and
// device to host, converting the dtype and handling any strides.
//
// Bytes cross PCIe (or NVLink) only in dense form: a strided or converting
// copy first makes a dense staging tensor on the side where converting is
// cheap (the GPU, with one kernel), moves it with one cudaMemcpy, then lays
// it out. Host-to-device copies from pinned memory return at once and run in
// the background (pinned_allocator.h); from pageable memory the driver stages
// the bytes itself and may first wait for the stream's queued work, so a
// training loop's inputs should come from pinned memory. Device-to-host copies
// wait for the stream, since the caller reads the host memory next; that
// wait is also where an out-of-range index found by a kernel is reported.
#include <cuda_runtime_api.h>

#include "tensor/creation.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/index_error.h"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/pinned_allocator.h"
#include "tensor/host_waits.h"

namespace loom::cuda {
namespace {


bool dense_as(const Tensor& t, DType dtype) { return t.is_contiguous() && t.dtype() == dtype; }

void copy_on_device(const Tensor& src, const Tensor& dst) {
  LaunchContext ctx(dst);
  if (dense_as(src, dst.dtype()) && dst.is_contiguous()) {
    CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(), cudaMemcpyDeviceToDevice, ctx.stream));
    return;
  }
  convert_on_device(src, dst);
}

// cuda:i -> cuda:j. The copy runs on the destination's current stream, after
// the work queued so far on the source's; the source's stream then waits for
// the copy, so that the source's memory is not reused while it is read.
void copy_between_devices(const Tensor& src, const Tensor& dst) {
  Tensor staged = src;
  if (!dense_as(src, dst.dtype())) {
    staged = empty(src.shape(), {.dtype = dst.dtype(), .device = src.device()});
    copy_on_device(src, staged);
  }
  Tensor landing = dst.is_contiguous() ? dst : empty(dst.shape(), {.dtype = dst.dtype(), .device = dst.device()});
  const Stream from = current_stream(src.device().index()), to = current_stream(dst.device().index());
  Event ready;
  ready.record(from);
  ready.wait(to);
  {
    DeviceGuard guard(dst.device().index());
    CUDA_CHECK(cudaMemcpyPeerAsync(landing.raw_data(), dst.device().index(), staged.raw_data(),
                                   src.device().index(), dst.nbytes(), to.handle()));
  }
  Event done;
  done.record(to);
  done.wait(from);
  if (!landing.is_same(dst)) copy_on_device(landing, dst);
}

void copy_host_to_device(const Tensor& src, const Tensor& dst) {
  {
    // A capture would read the host memory when each replay runs (pinned)
    // or not at all (pageable): neither is what the caller means.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(current_stream(dst.device().index()).handle(), &capturing));
    LOOM_CHECK(capturing == cudaStreamCaptureStatusNone, "copying a tensor of shape ", src.shape(),
               " from the host to ", dst.device(), " inside a CUDA graph capture: the graph would not read the "
               "host again at its replays; copy new data into the graph's static input tensors before replay()");
  }
  Tensor host = src;
  if (!src.is_contiguous()) {
    host = empty(src.shape(), {.dtype = src.dtype()});
    backend_for(DeviceType::CPU).copy(src, host);
  }
  LaunchContext ctx(dst);
  Tensor landing =
      dense_as(dst, src.dtype()) ? dst : empty(src.shape(), {.dtype = src.dtype(), .device = dst.device()});
  CUDA_CHECK(cudaMemcpyAsync(landing.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice, ctx.stream));
  // From pageable memory the call returns once the driver has its own copy
  // (having waited for the stream, if it chose to); from pinned memory the
  // copy is still reading: keep the block from reuse.
  if (host.storage()->allocator() == &pinned_allocator())
    record_pinned_use(host.storage()->data(), ctx.stream, ctx.device);
  if (!landing.is_same(dst)) convert_on_device(landing, dst);
}

void copy_device_to_host(const Tensor& src, const Tensor& dst) {
  // Before any work is queued: a capture refuses it here, by name.
  note_host_wait("a copy from a CUDA tensor to the host (item(), cpu(), to(kCPU))");
  LaunchContext ctx(src);
  Tensor dense = src;
  if (!dense_as(src, dst.dtype())) {
    dense = empty(src.shape(), {.dtype = dst.dtype(), .device = src.device()});
    convert_on_device(src, dense);
  }
  Tensor landing = dst.is_contiguous() ? dst : empty(dst.shape(), {.dtype = dst.dtype()});
  CUDA_CHECK(cudaMemcpyAsync(landing.raw_data(), dense.raw_data(), landing.nbytes(), cudaMemcpyDeviceToHost,
                             ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  check_index_errors(ctx.device);
  if (!landing.is_same(dst)) backend_for(DeviceType::CPU).copy(landing, dst);
}

}  // namespace

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  const bool from_gpu = src.device().is_cuda(), to_gpu = dst.device().is_cuda();
  if (from_gpu && to_gpu) {
    if (src.device() == dst.device()) return copy_on_device(src, dst);
    return copy_between_devices(src, dst);
  }
  if (to_gpu) return copy_host_to_device(src, dst);
  LOOM_INTERNAL_ASSERT(from_gpu, "CudaBackend::copy between two host tensors");
  copy_device_to_host(src, dst);
}

}  // namespace loom::cuda
