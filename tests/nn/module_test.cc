// Module mechanics: registration and names, modes, placement, state dicts, clones.
#include "nn/module.h"

#include <gtest/gtest.h>

#include <sstream>

#include "nn/nn.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;
using testing::values;

// A two-block model shaped like a GPT's, for the hierarchical names.
class BlockImpl : public nn::Cloneable<BlockImpl> {
 public:
  BlockImpl() : Cloneable("Block") { reset(); }
  void reset() override {
    ln = register_module("ln", nn::LayerNorm(8));
    attn = register_module("attn", nn::CausalSelfAttention({.embed_dim = 8, .num_heads = 2}));
  }
  Tensor forward(const Tensor& x) override { return x + attn->forward(ln->forward(x)); }
  nn::LayerNorm ln{nullptr};
  nn::CausalSelfAttention attn{nullptr};
};
LOOM_MODULE(Block);

class TinyGptImpl : public nn::Cloneable<TinyGptImpl> {
 public:
  TinyGptImpl() : Cloneable("TinyGpt") { reset(); }
  void reset() override {
    blocks = register_module("blocks", nn::ModuleList());
    blocks->push_back(Block());
    blocks->push_back(Block());
    head = register_module("head", nn::Linear(8, 5));
    scale = register_parameter("scale", ones({1}));
    steps = register_buffer("steps", zeros({1}, {.dtype = kInt64}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (size_t i = 0; i < blocks->size(); ++i) h = (*blocks)[i]->forward(h);
    return head->forward(h) * scale;
  }
  nn::ModuleList blocks{nullptr};
  nn::Linear head{nullptr};
  Tensor scale, steps;
};
LOOM_MODULE(TinyGpt);

TEST(Module, HierarchicalNames) {
  TinyGpt model;
  std::vector<std::string> names;
  for (auto& [name, p] : model->named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "scale", "blocks.0.ln.weight", "blocks.0.ln.bias", "blocks.0.attn.qkv.weight",
                       "blocks.0.attn.qkv.bias", "blocks.0.attn.proj.weight", "blocks.0.attn.proj.bias",
                       "blocks.1.ln.weight", "blocks.1.ln.bias", "blocks.1.attn.qkv.weight", "blocks.1.attn.qkv.bias",
                       "blocks.1.attn.proj.weight", "blocks.1.attn.proj.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(model->named_buffers().at(0).first, "steps");
  // 2 blocks of (LayerNorm 16 + qkv 8*24+24 + proj 8*8+8) + head 8*5+5 + scale 1
  EXPECT_EQ(model->num_parameters(), 2 * (16 + 216 + 72) + 45 + 1);
  std::vector<std::string> modules;
  for (auto& [name, m] : model->named_modules()) modules.push_back(name);
  EXPECT_EQ(modules.front(), "");
  EXPECT_NE(std::find(modules.begin(), modules.end(), "blocks.1.attn.qkv"), modules.end());
}

TEST(Module, RegistrationErrors) {
  nn::Linear fc(2, 3);
  EXPECT_THROW_MSG(fc->register_parameter("weight", zeros({1})), "Linear: 'weight' is already registered");
  EXPECT_THROW_MSG(fc->register_parameter("a.b", zeros({1})), "invalid parameter name 'a.b'");
  EXPECT_THROW_MSG(nn::Linear(0, 3), "Linear: in_features and out_features must be positive");
  EXPECT_THROW_MSG(nn::ReLU()->forward(zeros({1})).sum().backward(), "does not require grad");
}

TEST(Module, TrainEvalReachesEveryModule) {
  TinyGpt model;
  model->eval();
  for (auto& [name, m] : model->named_modules()) EXPECT_FALSE(m->is_training()) << name;
  model->train();
  for (auto& [name, m] : model->named_modules()) EXPECT_TRUE(m->is_training()) << name;
}

TEST(Module, ToDtypeConvertsParametersAndKeepsHandles) {
  nn::Linear fc(3, 2);
  Tensor handle = fc->weight;  // the same tensor as the module's
  fc->to(kFloat64);
  EXPECT_EQ(handle.dtype(), kFloat64);
  EXPECT_EQ(fc->named_parameters()[0].second.dtype(), kFloat64);
  EXPECT_TRUE(handle.requires_grad());
  Tensor y = fc->forward(ones({1, 3}, {.dtype = kFloat64}));
  EXPECT_EQ(y.dtype(), kFloat64);
}

TEST(Module, ZeroGradDropsGradients) {
  nn::Linear fc(3, 2);
  fc->forward(ones({4, 3})).sum().backward();
  EXPECT_TRUE(fc->weight.grad().defined());
  fc->zero_grad();
  EXPECT_FALSE(fc->weight.grad().defined());
}

TEST(StateDict, RoundTripAndStrictErrors) {
  manual_seed(1);
  TinyGpt a;
  manual_seed(2);
  TinyGpt b;
  Tensor x = randn({2, 3, 8});
  EXPECT_GT(testing::max_rel_error(a->forward(x), b->forward(x)), 1e-3);
  b->load_state_dict(a->state_dict());
  expect_values(b->forward(x), values(a->forward(x)), 1e-6);

  nn::StateDict missing = a->state_dict();
  missing.erase(missing.begin() + 1);
  EXPECT_THROW_MSG(b->load_state_dict(missing), "load_state_dict: missing keys: blocks.0.ln.weight");
  nn::StateDict extra = a->state_dict();
  extra.emplace_back("decoder.weight", zeros({2}));
  EXPECT_THROW_MSG(b->load_state_dict(extra), "unexpected keys: decoder.weight");
  b->load_state_dict(extra, /*strict=*/false);  // extras ignored when not strict
  nn::StateDict wrong = a->state_dict();
  wrong[0].second = zeros({3});
  EXPECT_THROW_MSG(b->load_state_dict(wrong, false),
                   "shape or dtype mismatch for scale (checkpoint [3] float32, model [1] float32)");
  // Integers are never reinterpreted as floats (a relabelled checkpoint dtype); float widths convert.
  wrong[0].second = zeros({1}, {.dtype = kInt64});
  EXPECT_THROW_MSG(b->load_state_dict(wrong), "(checkpoint [1] int64, model [1] float32)");
  wrong[0].second = full({1}, 2.5, {.dtype = kFloat64});
  b->load_state_dict(wrong);
  EXPECT_EQ(b->state_dict()[0].second.item(), 2.5);
}

// What users hold passes where a ModulePtr is asked for, and a ModulePtr of
// the right kind becomes a holder again; the wrong kind is a clear error.
TEST(ModuleHolder, ConvertsToAndFromModulePtr) {
  nn::Linear fc(2, 3);
  nn::ModulePtr p = fc;
  EXPECT_EQ(p.get(), fc.ptr().get());
  nn::Linear back(p);
  EXPECT_EQ(back.ptr(), fc.ptr());
  EXPECT_THROW_MSG(nn::Sequential{p}, "a Linear module cannot be held by this holder");
  EXPECT_THROW_MSG(nn::Linear{nn::ModulePtr()}, "a module holder was given a null module");
}

TEST(Clone, IsADeepCopyWithTheSameOutputs) {
  manual_seed(3);
  TinyGpt model;
  {
    NoGradGuard no_grad;
    model->steps.fill_(7);
  }
  const GeneratorState rng = default_generator().state();
  auto copy = std::static_pointer_cast<TinyGptImpl>(model->clone());
  EXPECT_EQ(default_generator().state().offset, rng.offset);  // cloning draws no random numbers
  Tensor x = randn({2, 4, 8});
  expect_values(copy->forward(x), values(model->forward(x)), 1e-6);
  EXPECT_EQ(copy->steps.item<int64_t>(), 7);
  // Separate storage: training the copy leaves the original alone.
  auto params = model->parameters(), copied = copy->parameters();
  ASSERT_EQ(params.size(), copied.size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_NE(params[i].storage(), copied[i].storage());
  {
    NoGradGuard no_grad;
    copy->head->weight.add_(1.0);
  }
  EXPECT_GT(testing::max_rel_error(copy->forward(x), model->forward(x)), 1e-3);
  // Typed members of the copy point at the copy's own submodules.
  EXPECT_NE(copy->head.ptr(), model->head.ptr());
  nn::NamedTensors named = copy->named_parameters();
  auto head_weight = std::find_if(named.begin(), named.end(), [](auto& e) { return e.first == "head.weight"; });
  ASSERT_NE(head_weight, named.end());
  EXPECT_TRUE(copy->head->weight.is_same(head_weight->second));
}

TEST(Clone, SequentialAndUncloneableModules) {
  nn::Sequential net(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2));
  auto copy = net->clone();
  Tensor x = randn({5, 3});
  expect_values(copy->forward(x), values(net->forward(x)), 1e-6);
  class PlainImpl : public nn::Module {
   public:
    PlainImpl() : Module("Plain") {}
  };
  EXPECT_THROW_MSG(std::make_shared<PlainImpl>()->clone(), "Plain cannot be cloned: derive it from nn::Cloneable");
}

TEST(Module, PrintsLikePyTorch) {
  nn::Sequential net(nn::Conv2d({.in_channels = 1, .out_channels = 8, .kernel_size = 3, .padding = 1}), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Flatten(), nn::Linear(8 * 14 * 14, 10));
  std::ostringstream out;
  out << net;
  EXPECT_EQ(out.str(),
            "Sequential(\n"
            "  (0): Conv2d(1, 8, kernel_size=3, stride=1, padding=1)\n"
            "  (1): ReLU()\n"
            "  (2): MaxPool2d(kernel_size=2, stride=2, padding=0)\n"
            "  (3): Flatten(start_dim=1, end_dim=-1)\n"
            "  (4): Linear(in_features=1568, out_features=10, bias=true)\n"
            ")");
}

}  // namespace
}  // namespace loom
