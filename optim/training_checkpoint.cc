#include "optim/training_checkpoint.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "nn/checkpoint.h"

namespace loom::optim {
namespace {

const char* kModel = "model.";
const char* kOptim = "optim.";
const std::set<std::string> kReservedKeys = {"epoch",   "step",   "rng_seed",        "rng_offset",
                                             "program", "layout", "optimizer_params"};

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

std::string described(const CheckpointWriter& w) { return w.program + " (" + w.layout + ")"; }

// The model's name for each of the optimizer's parameters ("" for one it does not have).
std::vector<std::string> optimizer_param_names(const nn::Module& model, const Optimizer& optimizer) {
  std::map<const TensorImpl*, std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.emplace(p.impl(), name);
  std::vector<std::string> out;
  for (const Tensor& p : optimizer.params()) {
    auto it = names.find(p.impl());
    out.push_back(it == names.end() ? "" : it->second);
  }
  return out;
}

std::string param_label(const std::vector<std::string>& names, size_t i) {
  return names[i].empty() ? "optimizer parameter " + std::to_string(i) : "parameter '" + names[i] + "'";
}

// The file's optimizer state covers exactly this optimizer's parameters: the
// same ones in the same order, each with its step count and, once stepped,
// all of its state, shaped like it. Optimizer::load_state_dict checks the
// same by index; here the errors name the parameter.
void check_optimizer_state(const TrainingCheckpoint& c, const nn::Module& model, const Optimizer& optimizer) {
  const std::vector<std::string> names = optimizer_param_names(model, optimizer);
  LOOM_CHECK(c.optimizer_params.size() == names.size(), "training checkpoint ", c.path, ": its optimizer steps ",
             c.optimizer_params.size(), " parameters, this run's ", names.size(),
             " (saved for another model, or for part of one)");
  for (size_t i = 0; i < names.size(); ++i)
    LOOM_CHECK(c.optimizer_params[i] == names[i], "training checkpoint ", c.path, ": optimizer parameter ", i, " is '",
               c.optimizer_params[i], "' in the file but '", names[i], "' in this run");
  const std::map<std::string, Tensor> state(c.optimizer_state.begin(), c.optimizer_state.end());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    auto step = state.find(prefix + "step");
    LOOM_CHECK(step != state.end(), "training checkpoint ", c.path, ": the optimizer state of ", param_label(names, i),
               " lacks '", prefix, "step' (saved for every parameter): the file is incomplete");
    if (step->second.numel() != 1 || is_floating(step->second.dtype()) || step->second.item<int64_t>() <= 0)
      continue;  // not stepped (or malformed: Optimizer::load_state_dict says how)
    const Tensor& param = optimizer.params()[i];
    for (const std::string& name : optimizer.state_names()) {
      auto it = state.find(prefix + name);
      LOOM_CHECK(it != state.end(), "training checkpoint ", c.path, ": the optimizer state of ", param_label(names, i),
                 " lacks '", prefix, name, "', which a parameter has once it has stepped: the file is incomplete");
      LOOM_CHECK(it->second.shape() == param.shape(), "training checkpoint ", c.path, ": the optimizer state '", prefix,
                 name, "' has shape ", it->second.shape(), " but ", param_label(names, i), " has shape ",
                 param.shape());
    }
  }
}

// The file's tensors (the live ones: the caller copies them if it must) and
// metadata. `what` names the call in errors.
TrainingSnapshot training_state(const char* what, const std::string& path, const nn::Module& model,
                                const Optimizer& optimizer, const TrainingProgress& progress,
                                const CheckpointWriter& writer) {
  LOOM_CHECK(!writer.program.empty() && !writer.layout.empty(), what, " ", path,
             ": name the program and the layout that write it (CheckpointWriter), got '", writer.program, "' and '",
             writer.layout, "'");
  for (const auto& [key, value] : progress.extra)
    LOOM_CHECK(kReservedKeys.count(key) == 0, what, " ", path, ": extra key '", key, "' is reserved");
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
  metadata["program"] = writer.program;
  metadata["layout"] = writer.layout;
  metadata["optimizer_params"] = nlohmann::json(optimizer_param_names(model, optimizer)).dump();
  return {std::move(tensors), std::move(metadata)};
}

}  // namespace

void save_training_checkpoint(const std::string& path, const nn::Module& model, const Optimizer& optimizer,
                              const TrainingProgress& progress, const CheckpointWriter& writer) {
  write_training_snapshot(path, training_state("save_training_checkpoint", path, model, optimizer, progress, writer));
}

TrainingSnapshot snapshot_training_state(const nn::Module& model, const Optimizer& optimizer,
                                         const TrainingProgress& progress, const CheckpointWriter& writer) {
  TrainingSnapshot snapshot =
      training_state("snapshot_training_state", "(snapshot)", model, optimizer, progress, writer);
  for (auto& [name, t] : snapshot.tensors)  // to() copies a device's tensor, contiguous; a host one it returns as is
    t = t.device().is_cpu() ? contiguous_copy(t.detach()) : t.detach().to(Device::cpu());
  return snapshot;
}

void write_training_snapshot(const std::string& path, const TrainingSnapshot& snapshot) {
  nn::save_safetensors(path, snapshot.tensors, snapshot.metadata);
}

TrainingCheckpoint read_training_checkpoint(const std::string& path, const CheckpointWriter& this_run) {
  nn::Checkpoint c = nn::load_safetensors(path);
  LOOM_CHECK(c.checksummed, "training checkpoint ", path,
             ": has no checksums; loom writes them in every training checkpoint (written by something else?)");
  TrainingCheckpoint out;
  out.path = path;
  // Who wrote it, before anything else: another program's or layout's file
  // is refused as such, not by the first of its tensors that does not fit.
  auto program = c.metadata.find("program"), layout = c.metadata.find("layout");
  LOOM_CHECK(program != c.metadata.end() && layout != c.metadata.end(), "training checkpoint ", path,
             " does not say which program and layout wrote it (written by an older loom?); this run is ",
             described(this_run), ": start it afresh");
  out.writer = {program->second, layout->second};
  LOOM_CHECK(out.writer.program == this_run.program && out.writer.layout == this_run.layout, "checkpoint ", path,
             " was written by ", described(out.writer), "; this run is ", described(this_run),
             ": only a run of the same program and layout can continue it");
  for (const auto& [name, t] : c.tensors) {
    if (name.rfind(kModel, 0) == 0)
      out.model_state.emplace_back(name.substr(6), t);
    else if (name.rfind(kOptim, 0) == 0)
      out.optimizer_state.emplace_back(name.substr(6), t);
    else
      LOOM_FAIL("training checkpoint ", path, ": unexpected tensor '", name, "'");
  }
  constexpr uint64_t kMaxCount = INT64_MAX;
  out.progress.epoch = static_cast<int64_t>(metadata_number(c.metadata, "epoch", path, kMaxCount));
  out.progress.step = static_cast<int64_t>(metadata_number(c.metadata, "step", path, kMaxCount));
  out.rng = {metadata_number(c.metadata, "rng_seed", path), metadata_number(c.metadata, "rng_offset", path)};
  auto params = c.metadata.find("optimizer_params");
  LOOM_CHECK(params != c.metadata.end(), "training checkpoint ", path, ": metadata 'optimizer_params' is missing");
  // A list of names nests one level: anything deeper is refused as it is parsed, before it costs memory.
  const nlohmann::json::parser_callback_t flat = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    LOOM_CHECK(depth == 0 || (event != nlohmann::json::parse_event_t::object_start &&
                              event != nlohmann::json::parse_event_t::array_start),
               "training checkpoint ", path, ": metadata 'optimizer_params' is not a JSON list of names");
    return true;
  };
  const nlohmann::json names = nlohmann::json::parse(params->second, flat, /*allow_exceptions=*/false);
  LOOM_CHECK(names.is_array() && std::all_of(names.begin(), names.end(), [](const auto& n) { return n.is_string(); }),
             "training checkpoint ", path, ": metadata 'optimizer_params' is not a JSON list of names");
  out.optimizer_params = names.get<std::vector<std::string>>();
  for (const auto& [key, value] : c.metadata)
    if (kReservedKeys.count(key) == 0) out.progress.extra[key] = value;
  return out;
}

void restore_training_checkpoint(const TrainingCheckpoint& c, nn::Module& model, Optimizer& optimizer) {
  check_optimizer_state(c, model, optimizer);
  try {  // all checked, now restore: the optimizer first (it changes nothing if the file does not fit it)
    optimizer.load_state_dict(c.optimizer_state);
    model.load_state_dict(c.model_state);
  } catch (const Error& e) {
    LOOM_FAIL("training checkpoint ", c.path, ": ", e.what());
  }
  default_generator().set_state(c.rng);
}

TrainingProgress load_training_checkpoint(const std::string& path, nn::Module& model, Optimizer& optimizer,
                                          const CheckpointWriter& this_run) {
  const TrainingCheckpoint c = read_training_checkpoint(path, this_run);
  restore_training_checkpoint(c, model, optimizer);
  return c.progress;
}

}  // namespace loom::optim
