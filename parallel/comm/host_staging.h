// What HostStagedGroup needs of the GPU, kept apart so that the group itself
// is plain C++: host_staging_cuda.cc implements it with CUDA streams and
// events; host_staging_no_cuda.cc, in builds without CUDA (where no tensor is
// ever on a GPU), says so if called. All copies go on one staging stream per
// GPU, so later copies are ordered after earlier ones.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace loom::parallel::staging {

// A point in a GPU stream's queue.
struct ReadyMark;

// On the issuing thread: marks the point of `device`'s current stream after
// which `tensors` hold their values, and keeps their memory from being
// reused until the staging stream is done with them.
std::shared_ptr<ReadyMark> mark_ready(int device, const std::vector<Tensor>& tensors);

// On the staging thread: waits (host) until `ready` is reached and returns a
// pinned host copy of `tensor`, or copies it into `host` (pinned memory of
// its shape: a view of a larger host tensor, say).
Tensor to_host(const ReadyMark& ready, const Tensor& tensor);
void copy_to_host(const ReadyMark& ready, const Tensor& tensor, const Tensor& host);
// A pinned host tensor shaped like `like`, for results.
Tensor host_like(const Tensor& like);

// Copies each (host, device) pair to the device on the staging stream of
// `ready`'s device, after `ready` (the targets may still be in use by work
// queued before the operation), without waiting, and returns what
// Work::wait() must run: make the waiting thread's current stream wait for
// these copies.
std::function<void()> copy_to_device(const ReadyMark& ready,
                                     const std::vector<std::pair<Tensor, Tensor>>& host_to_device);

}  // namespace loom::parallel::staging
