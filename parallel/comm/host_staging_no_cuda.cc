// host_staging.h in builds without CUDA: no tensor can be on a GPU, so
// HostStagedGroup never calls these; if it did, this says why it cannot.
#include "parallel/comm/host_staging.h"

#include "tensor/error.h"

namespace loom::parallel::staging {

struct ReadyMark {};

namespace {
[[noreturn]] void no_cuda() { LOOM_FAIL("host staging: loom was built without CUDA (--//:cuda=false)"); }
}  // namespace

std::shared_ptr<ReadyMark> mark_ready(int, const std::vector<Tensor>&) { no_cuda(); }
Tensor to_host(const ReadyMark&, const Tensor&) { no_cuda(); }
void copy_to_host(const ReadyMark&, const Tensor&, const Tensor&) { no_cuda(); }
Tensor host_like(const Tensor&) { no_cuda(); }
std::function<void()> copy_to_device(const ReadyMark&, const std::vector<std::pair<Tensor, Tensor>>&) { no_cuda(); }

}  // namespace loom::parallel::staging
