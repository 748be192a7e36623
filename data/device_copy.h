// How the DataLoader gets batches onto a GPU without the training step
// waiting for them: built in pinned host memory by the workers, copied to the
// device on a side stream while the previous step runs, and handed over with
// the consumer's stream ordered after the copy (the host does not wait).
// device_copy_cuda.cc does it with CUDA streams and events; in builds without
// CUDA (where no batch goes to a GPU) device_copy_no_cuda.cc says so if asked.
#pragma once

#include <memory>

#include "data/dataset.h"

namespace loom::data::device_copy {

struct InFlight;  // a batch on its way to a device

// On a worker thread: the batch in pinned (page-locked) host memory, so that
// its copy to the device runs asynchronously.
Batch pin(Batch batch);

// Starts copying a (pinned) batch to `device` on that device's copy stream;
// returns at once.
std::shared_ptr<InFlight> start(Batch batch, Device device);

// The batch on the device, with the calling thread's current stream ordered
// after its copy, and its memory kept until that stream is done with it.
Batch finish(const InFlight& copy);

}  // namespace loom::data::device_copy
