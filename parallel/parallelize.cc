#include "parallel/parallelize.h"

#include <algorithm>
#include <sstream>

#include "nn/functional.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "parallel/context_parallel/sequence_split.h"
#include "parallel/tensor_parallel/conjugates.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {

namespace F = nn::functional;
using Kind = ParallelStyle::Kind;

std::string ParallelStyle::name() const {
  switch (kind) {
    case Kind::kColwise: return "colwise";
    case Kind::kRowwise: return "rowwise";
    case Kind::kVocabParallel: return "vocab_parallel";
    case Kind::kSequenceParallel: return "sequence_parallel";
    case Kind::kReplicate: return "replicate";
  }
  return "?";
}

ParallelStyle colwise(ColwiseOptions o) { return {Kind::kColwise, o.parts, o.gather_output, o.input}; }
ParallelStyle rowwise(RowwiseOptions o) { return {Kind::kRowwise, 1, false, o.output}; }
ParallelStyle vocab_parallel(VocabParallelOptions o) { return {Kind::kVocabParallel, 1, false, o.output}; }
ParallelStyle sequence_parallel() { return {Kind::kSequenceParallel, 1, false, TokenLayout::kSequenceSharded}; }
ParallelStyle replicate() { return {Kind::kReplicate, 1, false, TokenLayout::kReplicated}; }

namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(path);
  while (std::getline(in, part, '.')) parts.push_back(part);
  return parts;
}

std::string describe(const nn::Module& module) {
  std::ostringstream out;
  module.pretty_print(out);
  return out.str();
}

const char* layout(TokenLayout tokens) {
  return tokens == TokenLayout::kSequenceSharded ? ", tokens sharded" : "";
}

// One module of the plan: where it is, what it is, how it is split.
struct Target {
  std::string name;
  std::shared_ptr<nn::Module> module;
  ParallelStyle style;
};

// Everything that can be wrong with a target, found before any module changes.
void check(const Target& t, int ranks) {
  const std::string where = "parallelize: " + t.name + " (" + describe(*t.module) + ")";
  const std::string what = t.style.name() + " over " + std::to_string(ranks) + " ranks";
  LOOM_CHECK(!t.module->has_forward_override(), where, " already runs ", t.module->forward_override_description());
  auto divides = [&](int64_t size, const char* of) {
    LOOM_CHECK(size % ranks == 0, where, ": ", what, " needs ", of, " (", size, ") to divide by ", ranks);
  };
  auto* linear = dynamic_cast<nn::LinearImpl*>(t.module.get());
  auto* embedding = dynamic_cast<nn::EmbeddingImpl*>(t.module.get());
  switch (t.style.kind) {
    case Kind::kColwise:
      LOOM_CHECK(linear, where, ": ", t.style.name(), " applies to a Linear only");
      LOOM_CHECK(t.style.parts >= 1 && linear->options.out_features % t.style.parts == 0, where, ": out_features (",
                 linear->options.out_features, ") is not ", t.style.parts, " equal blocks");
      divides(linear->options.out_features / t.style.parts,
              t.style.parts > 1 ? "each block of out_features" : "out_features");
      break;
    case Kind::kRowwise:
      LOOM_CHECK(linear, where, ": ", t.style.name(), " applies to a Linear only");
      divides(linear->options.in_features, "in_features");
      break;
    case Kind::kVocabParallel:
      LOOM_CHECK(embedding, where, ": ", t.style.name(), " applies to an Embedding only");
      divides(embedding->weight.size(0), "the vocabulary");
      break;
    case Kind::kSequenceParallel:
      LOOM_CHECK(embedding || dynamic_cast<nn::LayerNormImpl*>(t.module.get()) ||
                     dynamic_cast<nn::DropoutImpl*>(t.module.get()),
                 where, ": ", t.style.name(), " applies to a LayerNorm, a Dropout or an Embedding only");
      break;
    case Kind::kReplicate:
      break;
  }
}

// Replaces a parameter's values by `part`, in place (its handles, its name
// and its place in the model stay), in memory of its own: the full tensor goes.
void keep_only(const Tensor& parameter, const Tensor& part) {
  NoGradGuard no_grad;
  parameter.set_data(contiguous_copy(part));
}

std::string over(const ProcessGroup& group) { return " over " + std::to_string(group.size()) + " ranks"; }

// The module's forward becomes its parallel form; its sliced parameters are
// recorded in `out`. `dropout`: the model's largest dropout probability,
// for the check that ranks draw alike (every rank computes the replicated
// activations, so each must drop the same elements).
void apply(const Target& t, double dropout, TensorParallel& out) {
  const std::shared_ptr<ProcessGroup>& group = out.group;
  const ParallelStyle style = t.style;
  const std::string prefix = t.name + ".";
  switch (style.kind) {
    case Kind::kColwise: {
      auto& linear = dynamic_cast<nn::LinearImpl&>(*t.module);
      keep_only(linear.weight, column_slice(linear.weight, style.parts, *group));
      out.sliced.push_back({prefix + "weight", linear.weight, /*rows=*/true, style.parts});
      if (linear.bias.defined()) {
        keep_only(linear.bias, column_slice(linear.bias, style.parts, *group));
        out.sliced.push_back({prefix + "bias", linear.bias, /*rows=*/true, style.parts});
      }
      linear.set_forward_override(
          [module = &linear, weight = linear.weight, bias = linear.bias, group, style, dropout](const Tensor& x) {
            check_ranks_draw_alike("tensor parallel", module->is_training() ? dropout : 0, *group);
            return column_parallel_linear(x, weight, bias, group, style.tokens, style.gather_output);
          },
          "colwise" + over(*group) + layout(style.tokens) + (style.gather_output ? ", output gathered" : ""));
      break;
    }
    case Kind::kRowwise: {
      auto& linear = dynamic_cast<nn::LinearImpl&>(*t.module);
      keep_only(linear.weight, row_slice(linear.weight, *group));
      out.sliced.push_back({prefix + "weight", linear.weight, /*rows=*/false, 1});
      linear.set_forward_override(
          [weight = linear.weight, bias = linear.bias, group, style](const Tensor& x) {
            return row_parallel_linear(x, weight, bias, group, style.tokens);
          },
          "rowwise" + over(*group) + layout(style.tokens));
      break;
    }
    case Kind::kVocabParallel: {
      auto& embedding = dynamic_cast<nn::EmbeddingImpl&>(*t.module);
      keep_only(embedding.weight, column_slice(embedding.weight, 1, *group));
      out.sliced.push_back({prefix + "weight", embedding.weight, /*rows=*/true, 1});
      embedding.set_forward_override(
          [module = &embedding, weight = embedding.weight, group, style, dropout](const Tensor& ids) {
            check_ranks_draw_alike("tensor parallel", module->is_training() ? dropout : 0, *group);
            return vocab_parallel_embedding(ids, weight, group, style.tokens);
          },
          "vocab_parallel" + over(*group) + layout(style.tokens));
      break;
    }
    case Kind::kSequenceParallel: {
      const std::string description = "sequence_parallel" + over(*group);
      if (auto* norm = dynamic_cast<nn::LayerNormImpl*>(t.module.get())) {
        // Each rank normalises its own tokens; the scale and shift, whole on
        // every rank, get the sum of the ranks' gradients through f.
        norm->set_forward_override(
            [norm, group](const Tensor& x) { return layer_norm_on(*norm, x, TokenLayout::kSequenceSharded, group); },
            description);
      } else if (auto* dropout = dynamic_cast<nn::DropoutImpl*>(t.module.get())) {
        dropout->set_forward_override(
            [dropout, group](const Tensor& x) { return dropout_on(*dropout, x, TokenLayout::kSequenceSharded, *group); },
            description);
      } else {
        // An embedding whose rows sit on sharded tokens (a GPT's positions):
        // each rank looks up its tokens' ids, the last dim's 1/N.
        auto& embedding = dynamic_cast<nn::EmbeddingImpl&>(*t.module);
        embedding.set_forward_override(
            [weight = embedding.weight, group](const Tensor& ids) {
              LOOM_CHECK(ids.dim() >= 1, "sequence-parallel embedding: expected ids with a sequence dim, got shape ",
                         ids.shape());
              const int64_t piece = per_rank(ids.size(-1), *group, "the sequence");
              const Tensor mine = ids.narrow(ids.dim() - 1, group->rank() * piece, piece);
              return F::embedding(mine, copy_to_tensor_parallel(weight, group));
            },
            description);
      }
      break;
    }
    case Kind::kReplicate:
      break;
  }
}


}  // namespace

bool plan_entry_matches(const std::string& pattern, const std::string& name) {
  const std::vector<std::string> want = split_path(pattern), have = split_path(name);
  if (want.size() != have.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != "*" && want[i] != have[i]) return false;
  return true;
}

TensorParallel parallelize(nn::Module& model, std::shared_ptr<ProcessGroup> group, const Plan& plan) {
  LOOM_CHECK(group != nullptr, "parallelize: no process group");
  LOOM_CHECK(!plan.empty(), "parallelize: the plan is empty");
  // Match every entry first, and check every target: a plan that cannot
  // apply whole changes nothing.
  std::vector<Target> targets;
  std::vector<int> matched(plan.size(), 0);
  for (auto& [name, module] : model.named_modules()) {
    if (name.empty()) continue;
    int entry = -1;
    for (size_t e = 0; e < plan.size(); ++e) {
      if (!plan_entry_matches(plan[e].first, name)) continue;
      LOOM_CHECK(entry < 0, "parallelize: ", name, " matches two plan entries, '", plan[entry].first, "' and '",
                 plan[e].first, "'");
      entry = static_cast<int>(e);
    }
    if (entry < 0) continue;
    ++matched[entry];
    targets.push_back({name, module, plan[entry].second});
  }
  for (size_t e = 0; e < plan.size(); ++e)
    LOOM_CHECK(matched[e] > 0, "parallelize: the plan entry '", plan[e].first, "' matches no module of the ",
               model.type_name(), " (its modules are named as in named_modules(): \"blocks.0.fc\")");
  for (const Target& t : targets) check(t, group->size());

  double dropout = 0;
  for (auto& [name, module] : model.named_modules())
    if (auto* d = dynamic_cast<nn::DropoutImpl*>(module.get())) dropout = std::max(dropout, d->options.p);
  TensorParallel out;
  out.group = std::move(group);
  for (const Target& t : targets) {
    apply(t, dropout, out);
    out.modules.emplace_back(t.name, t.style.name());
  }
  for (const Tensor& p : model.parameters()) {
    bool sliced = false;
    for (const auto& s : out.sliced) sliced = sliced || s.tensor.is_same(p);
    if (!sliced) out.replicated.push_back(p);
  }
  return out;
}

Tensor TensorParallel::local_part(const std::string& name, const Tensor& full) const {
  for (const Slice& s : sliced)
    if (s.name == name) return s.rows ? column_slice(full, s.parts, *group) : row_slice(full, *group);
  return full;
}

Tensor TensorParallel::clip_grad_norm_(double max_norm) const {
  NoGradGuard no_grad;
  LOOM_CHECK(!sliced.empty() || !replicated.empty(), "TensorParallel::clip_grad_norm_: no parameters");
  const Device device = sliced.empty() ? replicated.front().device() : sliced.front().tensor.device();
  TensorList slices;
  for (const Slice& s : sliced) slices.push_back(s.tensor);
  // The slices' squares summed over the ranks; the replicated ones counted once.
  Tensor squares = optim::grad_squares_sum(slices, device).contiguous();
  group->all_reduce(squares, ReduceOp::Sum)->wait();
  const Tensor total = sqrt(sum(squares + optim::grad_squares_sum(replicated, device)));
  TensorList all = slices;
  all.insert(all.end(), replicated.begin(), replicated.end());
  optim::scale_grads_to_norm_(all, total, max_norm);
  return total;
}

}  // namespace loom::parallel
