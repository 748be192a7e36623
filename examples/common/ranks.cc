#include "examples/common/ranks.h"

#include <cstdio>

#include "parallel/comm/agreement.h"
#include "parallel/comm/for_device.h"

namespace loom::examples {

Rank join_job(std::shared_ptr<parallel::ProcessGroup> world, const Flags& flags, const std::string& device_spec) {
  std::map<std::string, std::string> settings = flags.settings({Scope::Run, Scope::Job});
  // Devices may differ per rank (cuda:0, cuda:1), their kind may not: the
  // collectives that choose the transport would not meet.
  settings["device kind"] = device_spec.rfind("cuda", 0) == 0 ? "cuda" : device_spec;
  parallel::check_ranks_agree(*world, settings);
  const parallel::DeviceChoice choice = parallel::device_for_rank(device_spec);
  if (!choice.note.empty()) std::printf("rank %d: %s\n", world->rank(), choice.note.c_str());
  return {parallel::for_device(std::move(world), choice.device), choice.device};
}

}  // namespace loom::examples
