// device_copy.h without CUDA: no batch ever goes to a GPU (the DataLoader
// refuses a CUDA device when there is none), so these are never reached.
#include "data/device_copy.h"

#include "tensor/error.h"

namespace loom::data::device_copy {

struct InFlight {};

Batch pin(Batch batch) { return batch; }

std::shared_ptr<InFlight> start(Batch, Device device) {
  LOOM_FAIL("DataLoader: cannot copy batches to ", device, ": loom was built without CUDA");
}

Batch finish(const InFlight&) { LOOM_FAIL("DataLoader: loom was built without CUDA"); }

}  // namespace loom::data::device_copy
