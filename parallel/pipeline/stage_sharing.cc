#include "parallel/pipeline/stage_sharing.h"

#include <map>
#include <string>

#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {

void share_stage_weights(const std::vector<nn::ModulePtr>& parts, ProcessGroup& group, Placement placement) {
  LOOM_CHECK(!parts.empty() && static_cast<int>(parts.size()) % group.size() == 0, "share_stage_weights: ",
             parts.size(), " stages for ", group.size(), " ranks");
  NoGradGuard no_grad;
  WorkPtr last;
  const int parts_count = static_cast<int>(parts.size()), chunks = parts_count / group.size();
  for (int i = 0; i < parts_count; ++i) {
    const int owner = place_part(i, group.size(), chunks, placement).stage;
    for (const Tensor& t : parts[i]->parameters()) last = group.broadcast(t, owner);
    for (const Tensor& t : parts[i]->buffers()) last = group.broadcast(t, owner);
  }
  if (last) last->wait();  // the group finishes operations in order
}

namespace {

// Rank 0's `values` (any length), on every rank.
std::vector<double> from_rank_zero(const std::vector<double>& values, ProcessGroup& group, Device device) {
  NoGradGuard no_grad;
  Tensor count = from_vector(std::vector<int64_t>{static_cast<int64_t>(values.size())}).to(device);
  group.broadcast(count, 0)->wait();
  Tensor all = from_vector(values).to(device);
  if (group.rank() != 0) all = zeros({count.item<int64_t>()}, {.dtype = kFloat64, .device = device});
  if (all.numel() > 0) group.broadcast(all, 0)->wait();
  return all.to_vector<double>();
}

}  // namespace

void share_boundaries(std::vector<int>& boundaries, ProcessGroup& group, Device device) {
  const std::vector<double> cuts =
      from_rank_zero(std::vector<double>(boundaries.begin(), boundaries.end()), group, device);  // exact: small integers
  boundaries.assign(cuts.begin(), cuts.end());
}

void share_part_times(std::vector<PassTimes>& part_times, ProcessGroup& group, Device device) {
  std::vector<double> flat;
  for (const PassTimes& t : part_times) flat.insert(flat.end(), {t.forward, t.backward_input, t.backward_weight});
  flat = from_rank_zero(flat, group, device);
  part_times.clear();
  for (size_t i = 0; i + 3 <= flat.size(); i += 3) part_times.push_back({flat[i], flat[i + 1], flat[i + 2]});
}

void share_stage_optimizer_state(const std::vector<nn::ModulePtr>& parts, optim::Optimizer& optimizer,
                                 ProcessGroup& group, Placement placement) {
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < optimizer.params().size(); ++i) index.emplace(optimizer.params()[i].impl(), i);
  const nn::NamedTensors mine = optimizer.state_dict();
  const std::map<std::string, Tensor> saved(mine.begin(), mine.end());
  NoGradGuard no_grad;
  struct Shared {
    size_t index;
    Tensor step;                  // [1] int64: 0 before the first step
    std::vector<Tensor> values;   // optimizer.state_names(), zeros where the owner has none
  };
  std::vector<Shared> shared;
  WorkPtr last;
  const int count = static_cast<int>(parts.size()), chunks = count / group.size();
  for (int k = 0; k < count; ++k) {
    const int owner = place_part(k, group.size(), chunks, placement).stage;
    for (const Tensor& p : parts[k]->parameters()) {
      Shared s{index.at(p.impl()), {}, {}};
      const std::string prefix = "state." + std::to_string(s.index) + ".";
      s.step = saved.at(prefix + "step").reshape({1}).to(p.device());
      last = group.broadcast(s.step, owner);
      for (const std::string& name : optimizer.state_names()) {
        auto it = saved.find(prefix + name);
        s.values.push_back(group.rank() == owner && it != saved.end() ? contiguous_copy(it->second) : zeros_like(p));
        last = group.broadcast(s.values.back(), owner);
      }
      shared.push_back(std::move(s));
    }
  }
  if (last) last->wait();  // the group finishes operations in order
  LOOM_CHECK(shared.size() == optimizer.params().size(), "share_stage_optimizer_state: the parts hold ", shared.size(),
             " of the optimizer's ", optimizer.params().size(), " parameters");
  nn::NamedTensors all{{"lr", saved.at("lr")}};
  for (const Shared& s : shared) {
    const std::string prefix = "state." + std::to_string(s.index) + ".";
    const Tensor step = s.step.to(Device::cpu()).reshape({});
    all.emplace_back(prefix + "step", step);
    if (step.item<int64_t>() == 0) continue;
    for (size_t j = 0; j < s.values.size(); ++j) all.emplace_back(prefix + optimizer.state_names()[j], s.values[j]);
  }
  optimizer.load_state_dict(all);
}

}  // namespace loom::parallel
