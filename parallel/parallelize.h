// Tensor and sequence parallelism applied to a model as it is written: a
// plan names the model's modules and says how each is split over the ranks
// of a group (torchtitan's parallelize_module and ParallelStyles). No
// parallel copy of the model is written; its own forward runs, and the
// modules a plan names run their parallel forms.
//
//   models::GPT gpt(config);            // the same seed on every rank: the same full model
//   parallel::Plan plan = {
//       {"wte", parallel::vocab_parallel()},                      // each rank 1/N of the vocabulary's rows
//       {"blocks.*.attn.qkv", parallel::colwise({.parts = 3})},   // q, k, v stacked: each rank its heads of each
//       {"blocks.*.attn.proj", parallel::rowwise()},              // partial sums all-reduced
//       {"blocks.*.fc", parallel::colwise()},
//       {"blocks.*.proj", parallel::rowwise()},
//       {"head", parallel::colwise()},                            // logits split along the vocabulary
//   };
//   parallel::TensorParallel tp = parallel::parallelize(*gpt, mesh.group("tensor"), plan);
//   optim::AdamW opt(gpt->parameters(), {.lr = 1e-3});           // after parallelize: the slices
//   Tensor loss = parallel::vocab_parallel_cross_entropy(gpt->forward(idx), targets, tp.group);
//   loss.backward();
//   tp.clip_grad_norm_(1.0);                                     // over the whole model's gradient
//   opt.step();
//
// The styles (Megatron-LM's layout; parallel/tensor_parallel/layers.h does the work):
//
//   colwise           Linear: this rank's rows of W and b, so 1/N of the outputs; its input enters
//                     through f (the gradient summed over the ranks), or, with the tokens sequence-
//                     sharded, is all-gathered along the sequence
//   rowwise           Linear: this rank's columns of W, taking a colwise layer's 1/N of the features;
//                     the partial sums are all-reduced (or reduce-scattered along the sequence), then
//                     the bias, whole on every rank, is added
//   vocab_parallel    Embedding: this rank's rows of the vocabulary; ids of other ranks look up zero
//   sequence_parallel LayerNorm, Dropout or a position Embedding, on activations holding this rank's
//                     1/N of the tokens (dim 1): norms and position rows enter through f, dropout
//                     draws the whole sequence's mask and keeps its tokens' part
//   replicate         nothing changes; says in the plan that the module stays whole
//
// Each module keeps its place and its name; its parameters are cut in place
// to this rank's slices (every rank must start from the same full weights),
// so make the optimizer afterwards. Entries are exact module names or
// patterns in which `*` stands for one name ("blocks.*.fc"). A plan is
// checked against the model before anything changes: an entry that matches
// no module, a module two entries match, a style on a module it does not
// apply to and a size that does not divide by the ranks are errors naming
// the module. Attention needs no entry of its own: nn::CausalSelfAttention
// counts its heads from its projection's output, the rank's share.
//
// With dropout in training, ranks must draw the same masks: one process per
// rank seeded alike, or a ThreadDefaultGenerator per rank thread.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"
#include "parallel/comm/process_group.h"
#include "parallel/tensor_parallel/layers.h"

namespace loom::parallel {

// How one module of a plan is split. Made by the functions below.
struct ParallelStyle {
  enum class Kind { kColwise, kRowwise, kVocabParallel, kSequenceParallel, kReplicate };
  Kind kind = Kind::kReplicate;
  int parts = 1;                                 // colwise: stacked blocks of rows, each sliced
  bool gather_output = false;                    // colwise: every rank's outputs side by side
  TokenLayout tokens = TokenLayout::kReplicated;  // colwise: the input's; rowwise, vocab_parallel: the output's
  std::string name() const;                       // "colwise", "rowwise", ...
};

struct ColwiseOptions {
  int parts = 1;               // the weight is `parts` blocks of rows (attention's q, k, v): each rank its share of each
  bool gather_output = false;  // all-gather the outputs (else each rank keeps its 1/N)
  TokenLayout input = TokenLayout::kReplicated;  // kSequenceSharded: the input holds this rank's tokens
};
ParallelStyle colwise(ColwiseOptions options = {});

struct RowwiseOptions {
  TokenLayout output = TokenLayout::kReplicated;  // kSequenceSharded: reduce-scattered along the sequence
};
ParallelStyle rowwise(RowwiseOptions options = {});

struct VocabParallelOptions {
  TokenLayout output = TokenLayout::kReplicated;  // kSequenceSharded: each rank gets its 1/N of the tokens
};
ParallelStyle vocab_parallel(VocabParallelOptions options = {});

ParallelStyle sequence_parallel();
ParallelStyle replicate();

// Module names or patterns, each with its style, applied in the model's order.
using Plan = std::vector<std::pair<std::string, ParallelStyle>>;

// What parallelize() did to a model, and what training it needs.
struct TensorParallel {
  std::shared_ptr<ProcessGroup> group;
  // Each module a plan entry matched, with its style's name, in named_modules() order.
  std::vector<std::pair<std::string, std::string>> modules;

  struct Slice {      // a parameter each rank holds a part of
    std::string name;  // as in the model's named_parameters()
    Tensor tensor;
    bool rows;  // rows (colwise, vocab_parallel) or columns (rowwise) of the full parameter
    int parts;  // colwise: stacked blocks, each sliced
  };
  std::vector<Slice> sliced;
  TensorList replicated;  // the parameters every rank holds whole

  // This rank's part of the full model's parameter `name` (a copy of `full`
  // for a replicated one): for loading a full checkpoint, or comparing.
  Tensor local_part(const std::string& name, const Tensor& full) const;
  // clip_grad_norm_ over the whole model's gradient: the slices' squares
  // summed over the ranks, the replicated parameters' counted once.
  Tensor clip_grad_norm_(double max_norm) const;
};

// Applies `plan` to `model` over `group` (every rank calls it alike).
TensorParallel parallelize(nn::Module& model, std::shared_ptr<ProcessGroup> group, const Plan& plan);

// Whether a dotted module name matches a plan entry ("*" stands for one name).
bool plan_entry_matches(const std::string& pattern, const std::string& name);

}  // namespace loom::parallel
