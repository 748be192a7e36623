#include "parallel/sharding/container_units.h"

#include <algorithm>
#include <utility>

#include "nn/layers/container.h"

namespace loom::parallel {

std::set<std::string> container_units(nn::Module& model) {
  std::set<std::string> units;
  for (const auto& [name, m] : model.named_modules()) {
    const bool container = dynamic_cast<nn::SequentialImpl*>(m.get()) || dynamic_cast<nn::ModuleListImpl*>(m.get());
    if (!container) continue;
    for (const auto& [child_name, child] : m->named_children())
      if (child->num_parameters() > 0) units.insert(name.empty() ? child_name : name + "." + child_name);
  }
  return units;
}

std::function<bool(const std::string&, const nn::Module&)> wrap_named(std::set<std::string> units) {
  return [units = std::move(units)](const std::string& name, const nn::Module&) { return units.count(name) > 0; };
}

int64_t largest_unit_numel(nn::Module& model, const std::set<std::string>& units) {
  int64_t largest = 0, in_units = 0;
  for (const auto& [name, m] : model.named_modules()) {
    if (units.count(name) == 0) continue;
    largest = std::max(largest, m->num_parameters());
    in_units += m->num_parameters();
  }
  return std::max(largest, model.num_parameters() - in_units);
}

}  // namespace loom::parallel
