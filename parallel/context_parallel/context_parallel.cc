#include "parallel/context_parallel/context_parallel.h"

#include "nn/functional.h"
#include "nn/nn.h"
#include "tensor/error.h"

namespace loom::parallel {

namespace {

std::string describe(const ContextParallelOptions& o, const ProcessGroup& group) {
  const char* exchange = o.exchange == KeyValueExchange::kRing       ? "ring"
                         : o.exchange == KeyValueExchange::kAllToAll ? "all-to-all"
                                                                     : "all-gather";
  return std::string("context parallel over ") + std::to_string(group.size()) + " ranks (" +
         (o.split == SequenceSplit::kZigZag ? "zig-zag" : "contiguous") + ", " + exchange + ")";
}

}  // namespace

std::vector<std::string> context_parallel(nn::Module& model, std::shared_ptr<ProcessGroup> group,
                                          const ContextParallelOptions& options) {
  LOOM_CHECK(group != nullptr, "context_parallel: no process group");
  const std::string description = describe(options, *group);
  const SequenceSplit split = options.split;
  const KeyValueExchange exchange = options.exchange;
  // Find everything first: a model that cannot take it all changes nothing.
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> targets;
  bool attention = false, positions = options.positions.empty();
  for (auto& [name, module] : model.named_modules()) {
    const bool is_attention = dynamic_cast<nn::CausalSelfAttentionImpl*>(module.get()) != nullptr;
    const bool is_dropout = dynamic_cast<nn::DropoutImpl*>(module.get()) != nullptr;
    const bool is_positions = !options.positions.empty() && name == options.positions;
    if (is_positions)
      LOOM_CHECK(dynamic_cast<nn::EmbeddingImpl*>(module.get()), "context_parallel: positions '", name,
                 "' is a ", module->type_name(), ", not an Embedding");
    if (!is_attention && !is_dropout && !is_positions) continue;
    LOOM_CHECK(!module->has_forward_override(), "context_parallel: ", name, " already runs ",
               module->forward_override_description(), "; context parallelism cannot also apply to it");
    attention = attention || is_attention;
    positions = positions || is_positions;
    targets.emplace_back(name, module);
  }
  LOOM_CHECK(attention, "context_parallel: the ", model.type_name(), " has no nn::CausalSelfAttention to run over ",
             "the sequence's shares");
  LOOM_CHECK(positions, "context_parallel: positions '", options.positions, "' names no module of the ",
             model.type_name());

  std::vector<std::string> names;
  for (auto& [name, module] : targets) {
    names.push_back(name);
    if (auto* attn = dynamic_cast<nn::CausalSelfAttentionImpl*>(module.get())) {
      // The module's own projections (in tensor parallel, its rank's heads),
      // and attention over the group between them.
      attn->set_forward_override(
          [attn, group, split, exchange](const Tensor& x) {
            const Tensor projected = attn->qkv->forward(x);  // (B, T/N, 3W)
            const Tensor y = context_parallel_self_attention(projected, attn->heads_in(projected), group, split, exchange);
            return attn->dropout->forward(attn->proj->forward(y));
          },
          description);
    } else if (auto* dropout = dynamic_cast<nn::DropoutImpl*>(module.get())) {
      dropout->set_forward_override(
          [dropout, group, split](const Tensor& x) { return dropout_on_shard(*dropout, x, *group, split); },
          description);
    } else {
      auto& embedding = dynamic_cast<nn::EmbeddingImpl&>(*module);
      embedding.set_forward_override(
          [weight = embedding.weight, group, split](const Tensor& places) {
            // Place i of this rank's T/N tokens is position sequence_positions()[i] of the sequence.
            LOOM_CHECK(places.dim() >= 1, "context-parallel positions: expected places with a sequence dim, got ",
                       "shape ", places.shape());
            const int64_t tokens = places.size(-1) * group->size();
            LOOM_CHECK(tokens <= weight.size(0), "context parallel: ", places.size(-1), " tokens a rank make ",
                       "sequences of ", tokens, " tokens over ", group->size(), " context ranks, beyond the ",
                       weight.size(0), " positions the embedding holds");
            const Tensor where = sequence_positions(places.size(-1), *group, split, places.device());
            return nn::functional::embedding(index_select(where, 0, places.reshape({-1})).reshape(places.shape().vec()),
                                             weight);
          },
          description);
    }
  }
  return names;
}

}  // namespace loom::parallel
