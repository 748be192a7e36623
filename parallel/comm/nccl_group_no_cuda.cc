// NcclGroup in builds without CUDA: no tensor is ever on a GPU, so nothing
// needs it; create() says why it cannot.
#include "parallel/comm/nccl_group.h"

#include "tensor/error.h"

namespace loom::parallel {

struct NcclGroup::State {};

std::shared_ptr<ProcessGroup> NcclGroup::create(std::shared_ptr<ProcessGroup>, Device device) {
  LOOM_FAIL("NcclGroup: loom was built without CUDA, so there is no NCCL backend (asked for ", device, ")");
}

NcclGroup::~NcclGroup() = default;
int NcclGroup::local_rank() const { return 0; }
void NcclGroup::enqueue(OpPtr) {}
std::shared_ptr<ProcessGroup> NcclGroup::make_subgroup(int, const std::vector<int>&, int, int64_t) { return nullptr; }

}  // namespace loom::parallel
