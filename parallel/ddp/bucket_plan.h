// Which gradients DistributedDataParallel all-reduces together.
//
// One all-reduce per gradient would pay the per-message latency hundreds of
// times a step; one all-reduce of everything could start only after backward
// has finished. Buckets sit between: gradients are grouped, in the order
// backward is expected to produce them, into buckets of at most `cap_bytes`,
// and each bucket's all-reduce starts as soon as its last gradient is ready,
// while backward goes on with the earlier layers.
//
// Backward meets the layers last-to-first, so the plan walks the parameters
// in reverse registration order (as PyTorch's DDP does). A bucket also ends
// where dtype or device change: one all-reduce moves one flat tensor.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace loom::parallel {

// A bucket: indices into the parameter list, in the order they are laid out
// in the bucket's flat tensor.
using Bucket = std::vector<size_t>;

// Buckets in the order their all-reduces are issued. A parameter larger than
// the cap gets a bucket of its own. cap_bytes must be positive.
std::vector<Bucket> plan_buckets(const TensorList& params, int64_t cap_bytes);

}  // namespace loom::parallel
