// parallelize() and context_parallel() on models they know nothing about:
// a plan checked against the model before anything changes, a model of the
// test's own (not a GPT) trained over a plan exactly as on one device, and
// the device mesh's groups over several dimensions. The GPT's plans are
// proven in tensor_parallel_test.cc and context_parallel_test.cc.
#include <gtest/gtest.h>

#include <sstream>

#include "nn/nn.h"
#include "optim/optimizer.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/parallelize.h"
#include "tests/parallel/equivalence.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

namespace F = nn::functional;
using loom::testing::max_rel_error;

// Tokens -> a bag-of-tokens classifier with one pre-norm MLP block: an
// embedding, a LayerNorm, an MLP (up, gelu, down) with a residual, a
// dropout, and a head over 8 classes. Its members are called directly, as
// a user's model does.
class TokenClassifierImpl : public nn::Cloneable<TokenClassifierImpl> {
 public:
  TokenClassifierImpl() : Cloneable("TokenClassifier") { reset(); }
  void reset() override {
    embed = register_module("embed", nn::Embedding(12, 8));
    norm = register_module("norm", nn::LayerNorm(8));
    up = register_module("up", nn::Linear(8, 16));
    down = register_module("down", nn::Linear(16, 8));
    drop = register_module("drop", nn::Dropout(0.0));
    head = register_module("head", nn::Linear(8, 8));
  }
  Tensor forward(const Tensor& ids) override {  // (B, T) -> (B, 8)
    Tensor x = embed(ids);
    x = x + drop(down(gelu(up(norm(x)))));
    return head(mean(x, {1}));
  }
  nn::Embedding embed{nullptr};
  nn::LayerNorm norm{nullptr};
  nn::Linear up{nullptr}, down{nullptr}, head{nullptr};
  nn::Dropout drop{nullptr};
};
LOOM_MODULE(TokenClassifier);

TokenClassifier make_classifier() {
  manual_seed(11);
  TokenClassifier model;
  model->to(kFloat64);
  return model;
}

Plan classifier_plan() {
  return {{"embed", vocab_parallel()},
          {"norm", replicate()},
          {"up", colwise()},
          {"down", rowwise()},
          {"head", colwise({.gather_output = true})}};  // whole logits: the loss is plain cross_entropy
}

// Three AdamW steps with clipping on every rank against the model on one
// device, over 1, 2 and 4 rank threads: the same loss, norm and weights.
class PlannedModel : public ::testing::TestWithParam<int> {};

TEST_P(PlannedModel, TrainsAsOneDevice) {
  testing::run_prepared_ranks<std::pair<TokenClassifier, TokenClassifier>>(
      GetParam(), [](int) { return std::make_pair(make_classifier(), make_classifier()); },
      [](const std::shared_ptr<ProcessGroup>& group, std::pair<TokenClassifier, TokenClassifier>& models) {
        auto& [full, mine] = models;
        const TensorParallel tp = parallelize(*mine, group, classifier_plan());
        ASSERT_EQ(tp.modules.size(), 5u);
        EXPECT_EQ(tp.modules[2], (std::pair<std::string, std::string>{"up", "colwise"}));
        EXPECT_EQ(mine->up->weight.size(0), 16 / group->size()) << "the Linear itself holds its slice";
        EXPECT_EQ(mine->down->weight.size(1), 16 / group->size());
        EXPECT_EQ(tp.sliced.size(), 6u) << "embed, up (weight, bias), down (weight), head (weight, bias)";
        Generator gen(4);
        const Tensor ids = randint(0, 12, {5, 7}, {.dtype = kInt64}, &gen), labels = randint(0, 8, {5}, {.dtype = kInt64}, &gen);
        optim::AdamW opt_full(full->parameters(), {.lr = 1e-2}), opt_mine(mine->parameters(), {.lr = 1e-2});
        for (int step = 0; step < 3; ++step) {
          opt_full.zero_grad();
          Tensor expected = F::cross_entropy(full->forward(ids), labels);
          expected.backward();
          const double expected_norm = optim::clip_grad_norm_(full->parameters(), 0.5).item();
          opt_full.step();
          opt_mine.zero_grad();
          Tensor loss = F::cross_entropy(mine->forward(ids), labels);
          loss.backward();
          const double norm = tp.clip_grad_norm_(0.5).item();
          opt_mine.step();
          EXPECT_NEAR(loss.item(), expected.item(), 1e-12) << "step " << step;
          EXPECT_NEAR(norm, expected_norm, 1e-10 * expected_norm) << "step " << step;
          const nn::NamedTensors a = mine->named_parameters(), b = full->named_parameters();
          ASSERT_EQ(a.size(), b.size());
          for (size_t i = 0; i < a.size(); ++i)
            EXPECT_LT(max_rel_error(a[i].second, tp.local_part(b[i].first, b[i].second)), 1e-10)
                << a[i].first << ", step " << step;
        }
      });
}

INSTANTIATE_TEST_SUITE_P(Ranks, PlannedModel, ::testing::Values(1, 2, 4));

// The same model with DDP over the data dimension of a 2 x 2 mesh, each
// replica in tensor parallel over its tensor group: equal to one device.
TEST(PlannedModel, DataByTensorParallelTrainsAsOneDevice) {
  testing::run_prepared_ranks<std::pair<TokenClassifier, TokenClassifier>>(
      4, [](int) { return std::make_pair(make_classifier(), make_classifier()); },
      [](const std::shared_ptr<ProcessGroup>& world, std::pair<TokenClassifier, TokenClassifier>& models) {
        auto& [full, mine] = models;
        DeviceMesh mesh(world, {{"data", 2}, {"tensor", 2}});
        const TensorParallel tp = parallelize(*mine, mesh.group("tensor"), classifier_plan());
        DistributedDataParallel replica(mine, mesh.group("data"));
        Generator gen(4);
        const Tensor ids = randint(0, 12, {4, 7}, {.dtype = kInt64}, &gen), labels = randint(0, 8, {4}, {.dtype = kInt64}, &gen);
        const int64_t first = 2 * mesh.coordinate("data");
        optim::AdamW opt_full(full->parameters(), {.lr = 1e-2}), opt_mine(mine->parameters(), {.lr = 1e-2});
        for (int step = 0; step < 2; ++step) {
          opt_full.zero_grad();
          F::cross_entropy(full->forward(ids), labels).backward();
          opt_full.step();
          opt_mine.zero_grad();
          F::cross_entropy(replica->forward(ids.narrow(0, first, 2)), labels.narrow(0, first, 2)).backward();
          opt_mine.step();
        }
        const nn::NamedTensors a = mine->named_parameters(), b = full->named_parameters();
        for (size_t i = 0; i < a.size(); ++i)
          EXPECT_LT(max_rel_error(a[i].second, tp.local_part(b[i].first, b[i].second)), 1e-10) << a[i].first;
      });
}

// Everything wrong with a plan is found before any module changes, and named.
TEST(Parallelize, PlansThatDoNotFitTheModelAreErrorsNamingTheModule) {
  testing::run_rank_threads(3, [](int, const std::shared_ptr<ProcessGroup>& group) {
    TokenClassifier model = make_classifier();
    const Tensor before = model->up->weight.clone();
    EXPECT_THROW_MSG(parallelize(*model, group, {{"up", colwise()}, {"dwn", rowwise()}}),
                     "the plan entry 'dwn' matches no module of the TokenClassifier");
    EXPECT_THROW_MSG(parallelize(*model, group, {{"norm", colwise()}}),
                     "parallelize: norm (LayerNorm([8]");
    EXPECT_THROW_MSG(parallelize(*model, group, {{"norm", colwise()}}), "colwise applies to a Linear only");
    EXPECT_THROW_MSG(parallelize(*model, group, {{"up", rowwise()}}),
                     "rowwise over 3 ranks needs in_features (8) to divide by 3");
    EXPECT_THROW_MSG(parallelize(*model, group, {{"embed", vocab_parallel()}, {"up", colwise()}}),
                     "parallelize: up (Linear(in_features=8, out_features=16, bias=true)): colwise over 3 ranks needs "
                     "out_features (16) to divide by 3");
    EXPECT_THROW_MSG(parallelize(*model, group, {{"up", colwise()}, {"*", replicate()}}),
                     "up matches two plan entries, 'up' and '*'");
    EXPECT_THROW_MSG(parallelize(*model, group, {{"head", sequence_parallel()}}),
                     "sequence_parallel applies to a LayerNorm, a Dropout or an Embedding only");
    EXPECT_EQ(model->up->weight.shape(), before.shape()) << "a refused plan changed the model";
    EXPECT_EQ(model->up->weight.to_vector<double>(), before.to_vector<double>());
    EXPECT_FALSE(model->embed->has_forward_override()) << "a refused plan changed the model";
  });
}

TEST(Parallelize, AParallelizedModuleIsNotParallelizedTwiceNorCloned) {
  testing::run_rank_threads(2, [](int, const std::shared_ptr<ProcessGroup>& group) {
    TokenClassifier model = make_classifier();
    parallelize(*model, group, classifier_plan());
    EXPECT_THROW_MSG(parallelize(*model, group, {{"up", colwise()}}),
                     "parallelize: up (Linear(in_features=8, out_features=16, bias=true)) already runs colwise over 2 ranks");
    EXPECT_THROW_MSG(model->clone(), "runs vocab_parallel over 2 ranks (parallel/parallelize.h), which a copy cannot share");
    std::ostringstream printed;
    printed << *model;
    EXPECT_NE(printed.str().find("(up): Linear(in_features=8, out_features=16, bias=true) [colwise over 2 ranks]"),
              std::string::npos)
        << printed.str();
  });
}

TEST(Parallelize, PatternsStandForOneNameEach) {
  EXPECT_TRUE(plan_entry_matches("blocks.*.attn.qkv", "blocks.3.attn.qkv"));
  EXPECT_TRUE(plan_entry_matches("head", "head"));
  EXPECT_FALSE(plan_entry_matches("blocks.*.attn.qkv", "blocks.3.attn"));
  EXPECT_FALSE(plan_entry_matches("blocks.*", "blocks.3.attn"));
  EXPECT_FALSE(plan_entry_matches("*.fc", "blocks.0.fc"));
  EXPECT_FALSE(plan_entry_matches("head", "heads"));
}

// Context parallelism needs attention to run over the sequence's shares.
TEST(ContextParallelTransform, AModelWithoutAttentionOrWithAWrongPositionsNameIsAnError) {
  testing::run_rank_threads(2, [](int, const std::shared_ptr<ProcessGroup>& group) {
    TokenClassifier model = make_classifier();
    EXPECT_THROW_MSG(context_parallel(*model, group), "the TokenClassifier has no nn::CausalSelfAttention");
    EXPECT_THROW_MSG(context_parallel(*model, group, {.positions = "norm"}), "positions 'norm' is a LayerNorm, not an Embedding");
    EXPECT_FALSE(model->drop->has_forward_override()) << "a refused transform changed the model";
  });
}

// A group over several mesh dimensions: the ranks that differ only along them.
TEST(DeviceMesh, GroupsOverSeveralDimensions) {
  testing::run_rank_threads(8, [](int rank, const std::shared_ptr<ProcessGroup>& world) {
    DeviceMesh mesh(world, {{"data", 2}, {"context", 2}, {"tensor", 2}});  // rank = 4 data + 2 context + tensor
    const std::shared_ptr<ProcessGroup>& data_context = mesh.group({"data", "context"});
    EXPECT_EQ(data_context->size(), 4);
    EXPECT_EQ(data_context->rank(), 2 * mesh.coordinate("data") + mesh.coordinate("context"));
    EXPECT_EQ(mesh.group({"context", "data"}).get(), data_context.get()) << "made once, whatever the order";
    EXPECT_EQ(mesh.group({"tensor"}).get(), mesh.group("tensor").get());
    // Its members are the ranks with this rank's tensor coordinate.
    Tensor members = full({1}, static_cast<double>(rank), {.dtype = kInt64});
    Tensor all = zeros({4}, {.dtype = kInt64});
    data_context->all_gather(all, members)->wait();
    const int t = rank % 2;
    EXPECT_EQ(all.to_vector<int64_t>(), (std::vector<int64_t>{t, 2 + t, 4 + t, 6 + t}));
    EXPECT_EQ(mesh.group({"data", "tensor"})->size(), 4);
    EXPECT_THROW_MSG(mesh.group({"data", "data"}), "dimension 'data' is named twice");
    EXPECT_THROW_MSG(mesh.group({"data", "pipeline"}), "no dimension 'pipeline'");
  });
}

}  // namespace
}  // namespace loom::parallel
