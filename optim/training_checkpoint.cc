#include "optim/training_checkpoint.h"

#include "nn/checkpoint.h"

namespace loom::optim {
namespace {

const char* kModel = "model.";
const char* kOptim = "optim.";

// A metadata number, strictly: decimal digits only (no sign, space or
// exponent), at most `max`.
uint64_t metadata_number(const std::map<std::string, std::string>& m, const std::string& key,
                         const std::string& path, uint64_t max = UINT64_MAX) {
  auto it = m.find(key);
  LOOM_CHECK(it != m.end(), "training checkpoint ", path, ": metadata '", key,
             "' is missing (not a loom training checkpoint?)");
  const std::string& text = it->second;
  uint64_t value = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (char c : text) ok = ok && c >= '0' && c <= '9' && !__builtin_mul_overflow(value, 10, &value) &&
                           !__builtin_add_overflow(value, static_cast<uint64_t>(c - '0'), &value);
  LOOM_CHECK(ok && value <= max, "training checkpoint ", path, ": metadata '", key, "' is '", text,
             "', not an integer from 0 to ", max);
  return value;
}

}  // namespace

void save_training_checkpoint(const std::string& path, const nn::Module& model, const Optimizer& optimizer,
                              const TrainingProgress& progress) {
  nn::NamedTensors tensors;
  for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(kModel + name, t);
  for (const auto& [name, t] : optimizer.state_dict()) tensors.emplace_back(kOptim + name, t);
  std::map<std::string, std::string> metadata = progress.extra;
  const GeneratorState rng = default_generator().state();
  metadata["epoch"] = std::to_string(progress.epoch);
  metadata["step"] = std::to_string(progress.step);
  // Strings of the unsigned values: JSON numbers would lose 64-bit precision.
  metadata["rng_seed"] = std::to_string(rng.seed);
  metadata["rng_offset"] = std::to_string(rng.offset);
  nn::save_safetensors(path, tensors, metadata);
}

TrainingProgress load_training_checkpoint(const std::string& path, nn::Module& model, Optimizer& optimizer) {
  nn::Checkpoint c = nn::load_safetensors(path);
  LOOM_CHECK(c.checksummed, "training checkpoint ", path,
             ": has no checksums; loom writes them in every training checkpoint (written by something else?)");
  nn::NamedTensors model_state, optim_state;
  for (const auto& [name, t] : c.tensors) {
    if (name.rfind(kModel, 0) == 0)
      model_state.emplace_back(name.substr(6), t);
    else if (name.rfind(kOptim, 0) == 0)
      optim_state.emplace_back(name.substr(6), t);
    else
      LOOM_FAIL("training checkpoint ", path, ": unexpected tensor '", name, "'");
  }
  TrainingProgress progress;
  constexpr uint64_t kMaxCount = INT64_MAX;
  progress.epoch = static_cast<int64_t>(metadata_number(c.metadata, "epoch", path, kMaxCount));
  progress.step = static_cast<int64_t>(metadata_number(c.metadata, "step", path, kMaxCount));
  const GeneratorState rng{metadata_number(c.metadata, "rng_seed", path),
                           metadata_number(c.metadata, "rng_offset", path)};
  for (const auto& [key, value] : c.metadata)
    if (key != "epoch" && key != "step" && key != "rng_seed" && key != "rng_offset") progress.extra[key] = value;
  try {  // all checked, now restore: the optimizer first (it changes nothing if the file does not fit it)
    optimizer.load_state_dict(optim_state);
    model.load_state_dict(model_state);
  } catch (const Error& e) {
    LOOM_FAIL("training checkpoint ", path, ": ", e.what());
  }
  default_generator().set_state(rng);
  return progress;
}

}  // namespace loom::optim
