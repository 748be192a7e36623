#include "parallel/sharding/fsdp.h"

#include <algorithm>
#include <deque>
#include <map>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/layers/container.h"
#include "tensor/error.h"

namespace loom::parallel {

// When each unit is gathered, freed and reduced: the hooks of forward
// (before_forward, after_forward) and backward (before_backward, on_gradient,
// finish_backward) for every unit, the root being unit 0.
struct FullyShardedDataParallelImpl::Runtime : std::enable_shared_from_this<Runtime> {
  static constexpr size_t kMaxReducing = 2;  // units whose flat gradients exist at once

  bool prefetch = true;
  std::vector<std::shared_ptr<FsdpUnit>> units;
  std::vector<size_t> last_order;  // the units in the order the last forward met them
  std::vector<size_t> order;       // this forward's, so far
  std::deque<size_t> reducing;
  bool backward_running = false;

  // The unit after (step 1) or before (step -1) `u` in `in`; none: npos.
  static size_t neighbour(const std::vector<size_t>& in, size_t u, int step) {
    auto it = std::find(in.begin(), in.end(), u);
    if (it == in.end()) return npos;
    const auto at = (it - in.begin()) + step;
    return at >= 0 && at < static_cast<std::ptrdiff_t>(in.size()) ? in[at] : npos;
  }
  static constexpr size_t npos = static_cast<size_t>(-1);

  void before_forward(size_t u) {
    if (u == 0) {  // a new forward
      if (!order.empty()) last_order = order;
      order.clear();
    }
    order.push_back(u);
    units[u]->wait_gathered();
    if (prefetch)
      if (size_t next = neighbour(last_order, u, 1); next != npos) units[next]->start_gather();
  }

  Tensor after_forward(size_t u, const Tensor& y) {
    const bool backward_follows = autograd::grad_enabled() && y.requires_grad();
    if (u != 0 || !backward_follows) units[u]->release();  // the root stays for its backward
    if (!backward_follows) return y;
    // An identity whose backward runs when y's gradient arrives, just before
    // the unit's own backward: the moment to gather the unit again.
    Tensor out = y.detach();
    std::weak_ptr<Runtime> weak = weak_from_this();
    autograd::record("FsdpBeforeBackward", {y}, out, [weak, u](const TensorList& grads) {
      if (auto runtime = weak.lock()) runtime->before_backward(u);
      return TensorList{grads[0]};
    });
    return out;
  }

  void before_backward(size_t u) {
    if (!backward_running) {
      backward_running = true;
      std::weak_ptr<Runtime> weak = weak_from_this();
      autograd::queue_callback([weak] {
        if (auto runtime = weak.lock()) runtime->finish_backward();
      });
    }
    units[u]->wait_gathered();
    // The root is never gathered again for backward: it stays until its own backward is over.
    if (prefetch)
      if (size_t previous = neighbour(order, u, -1); previous != npos && previous != 0)
        units[previous]->start_gather();
  }

  void on_gradient(size_t u, size_t i) {
    NoGradGuard no_grad;
    if (!units[u]->take_gradient(i)) return;
    // The unit's backward is over: reduce its gradients, free its parameters.
    start_reduce(u);
    units[u]->release();
  }

  void start_reduce(size_t u) {
    while (reducing.size() >= kMaxReducing) {
      units[reducing.front()]->finish_reduce();
      reducing.pop_front();
    }
    units[u]->start_reduce();
    reducing.push_back(u);
  }

  // Units the forward met but whose gradients did not all come (a parameter
  // unused this time) are reduced too, in the forward's order, the same on
  // every rank; then every reduction lands and nothing stays gathered.
  void finish_backward() {
    NoGradGuard no_grad;
    for (size_t u : order)
      if (!units[u]->reducing() && units[u]->any_gradient()) start_reduce(u);
    for (size_t u : reducing) units[u]->finish_reduce();
    reducing.clear();
    for (const auto& unit : units) unit->release();
    backward_running = false;
  }
};

namespace {

// Stands in a unit's place among its parent's children: gathers the unit
// around its forward. It mirrors the unit's own parameters, buffers and
// children, so that the model's names stay what they were.
class FsdpUnitModule : public nn::Module {
 public:
  FsdpUnitModule(nn::ModulePtr inner, std::shared_ptr<FullyShardedDataParallelImpl::Runtime> runtime, size_t unit)
      : Module("FsdpUnit"), inner_(std::move(inner)), runtime_(std::move(runtime)), unit_(unit) {
    for (const auto& [name, p] : inner_->named_parameters(/*recurse=*/false))
      register_parameter(name, p, p.requires_grad());
    for (const auto& [name, b] : inner_->named_buffers(/*recurse=*/false)) register_buffer(name, b);
    for (const auto& [name, child] : inner_->named_children()) register_module(name, child);
  }

  Tensor forward(const Tensor& x) override {
    runtime_->before_forward(unit_);
    return runtime_->after_forward(unit_, inner_->forward(x));
  }
  void train(bool on) override {
    Module::train(on);
    inner_->train(on);
  }
  void pretty_print(std::ostream& out) const override {
    out << "FsdpUnit(";
    inner_->pretty_print(out);
    out << ")";
  }

 private:
  nn::ModulePtr inner_;
  std::shared_ptr<FullyShardedDataParallelImpl::Runtime> runtime_;
  size_t unit_;
};

bool is_container(const nn::Module& m) {
  return dynamic_cast<const nn::SequentialImpl*>(&m) != nullptr ||
         dynamic_cast<const nn::ModuleListImpl*>(&m) != nullptr;
}

}  // namespace

FullyShardedDataParallelImpl::FullyShardedDataParallelImpl(nn::ModulePtr module, std::shared_ptr<ProcessGroup> group,
                                                           FsdpOptions options)
    : Module("FullyShardedDataParallel"), module_(std::move(module)), group_(std::move(group)) {
  LOOM_CHECK(module_ != nullptr, "FullyShardedDataParallel: no module");
  LOOM_CHECK(group_ != nullptr, "FullyShardedDataParallel: no process group");
  runtime_ = std::make_shared<Runtime>();
  runtime_->prefetch = options.prefetch;

  // The units the policy picks, by name; the root is "".
  std::vector<std::string> unit_names{""};
  std::map<std::string, nn::ModulePtr> by_name;
  std::map<std::string, std::pair<nn::ModulePtr, std::string>> parent_of;  // name -> (parent, child name)
  for (const auto& [name, m] : module_->named_modules()) {
    by_name[name] = m;
    for (const auto& [child_name, child] : m->named_children())
      parent_of[name.empty() ? child_name : name + "." + child_name] = {m, child_name};
    if (name.empty() || !options.wrap || !options.wrap(name, *m)) continue;
    const auto& [parent, child_name] = parent_of.at(name);
    LOOM_CHECK(is_container(*parent), "FullyShardedDataParallel: the wrap policy picked '", name, "', a child of a ",
               parent->type_name(), "; units must be children of a Sequential or a ModuleList, which call their "
               "children through the list that FSDP changes (a ", parent->type_name(),
               " calls its own handle, which FSDP cannot wrap)");
    unit_names.push_back(name);
  }
  // Each parameter belongs to the innermost unit around it.
  auto unit_of = [&](const std::string& param_name) {
    size_t best = 0;
    for (size_t u = 1; u < unit_names.size(); ++u) {
      const std::string prefix = unit_names[u] + ".";
      if (param_name.compare(0, prefix.size(), prefix) == 0 && unit_names[u].size() > unit_names[best].size())
        best = u;
    }
    return best;
  };
  std::vector<TensorList> params(unit_names.size());
  std::vector<std::vector<std::string>> names(unit_names.size());
  for (const auto& [name, p] : module_->named_parameters()) {
    const size_t u = unit_of(name);
    params[u].push_back(p);
    names[u].push_back(name);
  }
  for (size_t u = 0; u < unit_names.size(); ++u) {
    LOOM_CHECK(u == 0 || !params[u].empty(), "FullyShardedDataParallel: unit '", unit_names[u],
               "' has no parameters of its own; wrap modules that hold some");
    runtime_->units.push_back(std::make_shared<FsdpUnit>(unit_names[u], params[u], names[u], group_));
    if (!params[u].empty()) register_parameter("unit" + std::to_string(u), runtime_->units.back()->shard());
  }
  // Innermost first, so that an outer unit's wrapper mirrors the inner wrappers.
  for (size_t u = unit_names.size(); u-- > 1;) {
    const auto& [parent, child_name] = parent_of.at(unit_names[u]);
    parent->replace_module(child_name, std::make_shared<FsdpUnitModule>(by_name.at(unit_names[u]), runtime_, u));
  }
  // Each gradient, once accumulated, goes to its unit.
  std::weak_ptr<Runtime> weak = runtime_;
  for (size_t u = 0; u < runtime_->units.size(); ++u)
    for (size_t i = 0; i < params[u].size(); ++i)
      params[u][i].register_post_accumulate_grad_hook([weak, u, i](const Tensor&) {
        if (auto runtime = weak.lock()) runtime->on_gradient(u, i);
      });
  for (const auto& unit : runtime_->units) unit->release();
}

Tensor FullyShardedDataParallelImpl::forward(const Tensor& x) {
  runtime_->before_forward(0);
  return runtime_->after_forward(0, module_->forward(x));
}

void FullyShardedDataParallelImpl::train(bool on) {
  Module::train(on);
  module_->train(on);
}

const std::vector<std::shared_ptr<FsdpUnit>>& FullyShardedDataParallelImpl::units() const { return runtime_->units; }

int64_t FullyShardedDataParallelImpl::numel() const {
  int64_t n = 0;
  for (const auto& unit : runtime_->units) n += unit->flat().numel();
  return n;
}

int64_t FullyShardedDataParallelImpl::shard_numel() const {
  int64_t n = 0;
  for (const auto& unit : runtime_->units) n += unit->shard().numel();
  return n;
}

}  // namespace loom::parallel
