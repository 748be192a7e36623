#include "examples/common/ranks.h"

#include <cstdio>

#include "parallel/comm/agreement.h"
#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/for_device.h"
#include "tensor/fnv1a.h"

namespace loom::examples {

Rank join_job(std::shared_ptr<parallel::ProcessGroup> world, const Flags& flags, const std::string& device_spec) {
  // A hung job can be asked which rank hangs: `kill -USR2 <mpirun>` (docs/comm.md).
  parallel::dump_flight_record_on_signal();
  std::map<std::string, std::string> settings = flags.settings({Scope::Run, Scope::Job});
  // Devices may differ per rank (cuda:0, cuda:1), their kind may not: the
  // collectives that choose the transport would not meet.
  settings["device kind"] = device_spec.rfind("cuda", 0) == 0 ? "cuda" : device_spec;
  parallel::check_ranks_agree(*world, settings);
  const parallel::DeviceChoice choice = parallel::device_for_rank(device_spec);
  if (!choice.note.empty()) std::printf("rank %d: %s\n", world->rank(), choice.note.c_str());
  return {parallel::for_device(std::move(world), choice.device), choice.device};
}

namespace {

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

void check_ranks_read_the_same_text(parallel::ProcessGroup& world, const data::CharCorpus& corpus,
                                    const std::string& source_flag) {
  const std::string& chars = corpus.vocab.chars();
  uint64_t text = kFnv1aStart;
  for (const Tensor& part : {corpus.train, corpus.validation}) {
    const Tensor tokens = part.to(Device::cpu()).contiguous();
    text = fnv1a(tokens.data_ptr<int64_t>(), tokens.nbytes(), text);
  }
  const int64_t length = corpus.train.numel() + corpus.validation.numel();
  parallel::check_ranks_agree(
      world, {{"the vocabulary", std::to_string(chars.size()) + " characters, " + hex(fnv1a(chars.data(), chars.size()))},
              {"the text (" + source_flag + ")", std::to_string(length) + " characters, " + hex(text)}});
}

}  // namespace loom::examples
