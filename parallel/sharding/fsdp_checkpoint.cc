#include "parallel/sharding/fsdp_checkpoint.h"

#include <map>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "autograd/grad_mode.h"
#include "nn/checkpoint.h"
#include "tensor/creation.h"
#include "tensor/error.h"
#include "tensor/file_io.h"

namespace loom::parallel {

namespace {

// The units that have parameters, in the order of fsdp.parameters(): unit
// units_with_params[j] is the optimizer's parameter j.
std::vector<FsdpUnit*> units_with_params(FullyShardedDataParallelImpl& fsdp, const optim::Optimizer& opt) {
  std::vector<FsdpUnit*> out;
  for (const auto& unit : fsdp.units())
    if (!unit->params().empty()) out.push_back(unit.get());
  LOOM_CHECK(opt.params().size() == out.size(), "FSDP checkpoint: the optimizer steps ", opt.params().size(),
             " tensors, but the model has ", out.size(), " shards; build it from fsdp->parameters()");
  for (size_t j = 0; j < out.size(); ++j)
    LOOM_CHECK(opt.params()[j].is_same(out[j]->shard()), "FSDP checkpoint: the optimizer's parameter ", j,
               " is not the shard of unit '", out[j]->name(), "'; build it from fsdp->parameters()");
  return out;
}

std::string state_key(size_t index, const std::string& name) { return "state." + std::to_string(index) + "." + name; }
std::string full_key(const std::string& param, const std::string& name) { return "state." + param + "." + name; }

std::string shard_file(const std::string& dir, int rank, int world) {
  return dir + "/shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

}  // namespace

nn::StateDict full_optimizer_state_dict(FullyShardedDataParallelImpl& fsdp, const optim::Optimizer& opt) {
  const std::vector<FsdpUnit*> units = units_with_params(fsdp, opt);
  const nn::StateDict mine = opt.state_dict();
  const std::map<std::string, Tensor> by_key(mine.begin(), mine.end());
  NoGradGuard no_grad;
  nn::StateDict out{{"lr", by_key.at("lr")}};
  for (size_t j = 0; j < units.size(); ++j) {
    const FsdpUnit& unit = *units[j];
    if (auto step = by_key.find(state_key(j, "step")); step != by_key.end())
      for (const std::string& param : unit.param_names()) out.emplace_back(full_key(param, "step"), step->second);
    for (const std::string& name : opt.state_names()) {
      auto it = by_key.find(state_key(j, name));
      if (it == by_key.end()) continue;  // not stepped yet: on every rank alike
      const TensorList full = unit.split_flat(unit.gather_pieces(it->second).to(Device::cpu()));
      for (size_t i = 0; i < full.size(); ++i) out.emplace_back(full_key(unit.param_names()[i], name), full[i]);
    }
  }
  return out;
}

void load_full_optimizer_state_dict(FullyShardedDataParallelImpl& fsdp, optim::Optimizer& opt,
                                    const nn::StateDict& state) {
  const std::vector<FsdpUnit*> units = units_with_params(fsdp, opt);
  const std::map<std::string, Tensor> by_key(state.begin(), state.end());
  auto lr = by_key.find("lr");
  LOOM_CHECK(lr != by_key.end(), "FSDP optimizer state: 'lr' is missing");
  nn::StateDict mine{{"lr", lr->second}};
  for (size_t j = 0; j < units.size(); ++j) {
    const FsdpUnit& unit = *units[j];
    const std::string& first = unit.param_names().front();
    if (auto step = by_key.find(full_key(first, "step")); step != by_key.end())
      mine.emplace_back(state_key(j, "step"), step->second);
    for (const std::string& name : opt.state_names()) {
      TensorList values;
      for (const std::string& param : unit.param_names()) {
        auto it = by_key.find(full_key(param, name));
        if (it != by_key.end()) values.push_back(it->second);
      }
      if (values.empty()) continue;
      LOOM_CHECK(values.size() == unit.param_names().size(), "FSDP optimizer state: unit '", unit.name(), "' has '",
                 name, "' for ", values.size(), " of its ", unit.param_names().size(), " parameters");
      mine.emplace_back(state_key(j, name), unit.piece_of(values));
    }
  }
  opt.load_state_dict(mine);
}

void save_sharded(const std::string& dir, FullyShardedDataParallelImpl& fsdp, const optim::Optimizer& opt) {
  ProcessGroup& group = fsdp.process_group();
  const std::vector<FsdpUnit*> units = units_with_params(fsdp, opt);
  nn::StateDict tensors;
  nlohmann::json index = {{"format", "loom-fsdp-sharded"}, {"world_size", group.size()}, {"units", nlohmann::json::array()}};
  for (size_t j = 0; j < units.size(); ++j) {
    tensors.emplace_back("shard." + std::to_string(j), units[j]->shard().detach());
    index["units"].push_back({{"name", units[j]->name()}, {"numel", units[j]->flat().numel()}});
  }
  for (auto& [key, t] : opt.state_dict()) tensors.emplace_back("optimizer." + key, t);
  nn::save_safetensors(shard_file(dir, group.rank(), group.size()), tensors,
                       {{"rank", std::to_string(group.rank())}, {"world_size", std::to_string(group.size())}});
  group.barrier()->wait();  // every shard is in place before the index says the checkpoint is complete
  if (group.rank() == 0) write_file_atomically(dir + "/index.json", index.dump(2) + "\n");
  group.barrier()->wait();
}

void load_sharded(const std::string& dir, FullyShardedDataParallelImpl& fsdp, optim::Optimizer& opt) {
  ProcessGroup& group = fsdp.process_group();
  const std::vector<FsdpUnit*> units = units_with_params(fsdp, opt);
  const std::string index_path = dir + "/index.json";
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_file(index_path, "sharded checkpoint index", 1 << 20));
  } catch (const nlohmann::json::exception& e) {
    LOOM_FAIL(index_path, ": not a sharded checkpoint index (", e.what(), ")");
  }
  LOOM_CHECK(index.is_object() && index.value("format", "") == "loom-fsdp-sharded" && index["world_size"].is_number_integer() &&
                 index["units"].is_array(),
             index_path, ": not a loom FSDP sharded checkpoint index");
  const int saved_world = index["world_size"].get<int>();
  LOOM_CHECK(saved_world == group.size(), dir, ": the sharded checkpoint was saved by ", saved_world,
             " ranks, but this job has ", group.size(),
             "; a sharded checkpoint loads at its own world size (save a full one to change it)");
  LOOM_CHECK(index["units"].size() == units.size(), dir, ": the checkpoint has ", index["units"].size(),
             " units, this model ", units.size(), " (a different model or wrap policy?)");
  for (size_t j = 0; j < units.size(); ++j) {
    const auto& u = index["units"][j];
    LOOM_CHECK(u.value("name", std::string("?")) == units[j]->name() && u.value("numel", int64_t{-1}) == units[j]->flat().numel(),
               dir, ": unit ", j, " is '", u.value("name", std::string("?")), "' of ", u.value("numel", int64_t{-1}),
               " elements in the checkpoint but '", units[j]->name(), "' of ", units[j]->flat().numel(), " here");
  }
  const std::string path = shard_file(dir, group.rank(), group.size());
  struct stat info;
  LOOM_CHECK(::stat(path.c_str(), &info) == 0, dir, ": the shard of rank ", group.rank(), " is missing (", path, ")");
  const nn::Checkpoint shard = nn::load_safetensors(path);
  std::map<std::string, Tensor> by_key(shard.tensors.begin(), shard.tensors.end());
  nn::StateDict optimizer_state;
  for (const auto& [key, t] : shard.tensors)
    if (key.compare(0, 10, "optimizer.") == 0) optimizer_state.emplace_back(key.substr(10), t);
  NoGradGuard no_grad;
  for (size_t j = 0; j < units.size(); ++j) {
    auto it = by_key.find("shard." + std::to_string(j));
    LOOM_CHECK(it != by_key.end(), path, ": has no 'shard.", j, "' (unit '", units[j]->name(), "')");
    LOOM_CHECK(it->second.numel() == units[j]->shard().numel(), path, ": 'shard.", j, "' has ", it->second.numel(),
               " elements, but rank ", group.rank(), "'s piece of unit '", units[j]->name(), "' has ",
               units[j]->shard().numel(), " (a mismatched shard)");
    units[j]->shard().copy_(it->second.to(units[j]->shard().device(), units[j]->shard().dtype()));
  }
  opt.load_state_dict(optimizer_state);
}

// The model's full state (fsdp.h): each unit gathered in turn.
nn::StateDict FullyShardedDataParallelImpl::full_state_dict() {
  NoGradGuard no_grad;
  std::map<std::string, Tensor> values;
  for (const auto& unit : units()) {
    const bool was_gathered = unit->gathered();
    unit->wait_gathered();
    for (size_t i = 0; i < unit->params().size(); ++i) values[unit->param_names()[i]] = unit->params()[i].clone();
    if (!was_gathered) unit->release();
  }
  nn::StateDict out;
  for (const auto& [name, p] : module_->named_parameters()) out.emplace_back(name, values.at(name));
  for (const auto& [name, b] : module_->named_buffers()) out.emplace_back(name, b.clone());
  return out;
}

void FullyShardedDataParallelImpl::load_full_state_dict(const nn::StateDict& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  std::vector<std::string> missing;
  for (const auto& unit : units())
    for (size_t i = 0; i < unit->params().size(); ++i) {
      auto it = by_name.find(unit->param_names()[i]);
      if (it == by_name.end()) missing.push_back(unit->param_names()[i]);
      else
        LOOM_CHECK(it->second.shape() == unit->params()[i].shape(), "FullyShardedDataParallel::load_full_state_dict: '",
                   it->first, "' is ", it->second.shape(), " in the state but ", unit->params()[i].shape(),
                   " in the model");
    }
  LOOM_CHECK(missing.empty(), "FullyShardedDataParallel::load_full_state_dict: the state has no '", missing.front(),
             "' (", missing.size(), " parameter(s) missing)");
  for (const auto& unit : units()) {
    TensorList values;
    for (const std::string& name : unit->param_names()) values.push_back(by_name.at(name));
    unit->load_full(values);
  }
  NoGradGuard no_grad;
  for (const auto& [name, b] : module_->named_buffers()) {
    auto it = by_name.find(name);
    LOOM_CHECK(it != by_name.end(), "FullyShardedDataParallel::load_full_state_dict: the state has no buffer '", name, "'");
    b.copy_(it->second.to(b.device()).to(b.dtype()));
  }
}

}  // namespace loom::parallel
