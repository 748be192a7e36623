// CUDA graphs (tensor/device_graph.h): a captured training step, replayed,
// must give bit for bit what the same steps give uncaptured, with dropout
// drawing new numbers at each replay; what a capture cannot hold is refused
// with an error that names it; replays allocate nothing.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "examples/models/models.h"
#include "nn/float8_training.h"
#include "nn/nn.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "tensor/autocast.h"
#include "tensor/cudnn_benchmark.h"
#include "tensor/device_graph.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::gpu_device;
using testing::values;

// A model, its capturable optimizer (and GradScaler, under fp16), and one
// static batch on the GPU.
struct Training {
  nn::ModulePtr model;
  std::unique_ptr<optim::Optimizer> optimizer;
  Tensor input, target;
  std::function<Tensor(const Tensor&, const Tensor&)> loss;
  std::optional<DType> autocast;
  std::shared_ptr<optim::GradScaler> scaler = std::make_shared<optim::GradScaler>(
      optim::GradScalerOptions{.enabled = false});

  Tensor step() {
    optimizer->zero_grad();
    Tensor l;
    {
      AutocastGuard guard(autocast);
      l = loss(model->forward(input), target);
    }
    scaler->scale(l).backward();
    scaler->step(*optimizer);
    scaler->update();
    return l;
  }
};

std::vector<std::vector<double>> parameter_values(const nn::ModulePtr& model) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : model->parameters()) out.push_back(values(p));
  return out;
}

// A small MLP with dropout, trained by AdamW or SGD with momentum.
Training mlp(bool sgd, double dropout = 0.3) {
  manual_seed(11);
  Training t;
  t.model = nn::Sequential(nn::Linear(32, 64), nn::ReLU(), nn::Dropout(dropout), nn::Linear(64, 10));
  t.model->to(gpu_device());
  if (sgd)
    t.optimizer = std::make_unique<optim::SGD>(t.model->parameters(),
                                               optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .capturable = true});
  else
    t.optimizer = std::make_unique<optim::AdamW>(t.model->parameters(),
                                                 optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.01,
                                                                    .capturable = true});
  t.input = randn({16, 32}, {.device = gpu_device()});
  t.target = randint(0, 10, {16}, {.dtype = kInt64, .device = gpu_device()});
  t.loss = [](const Tensor& y, const Tensor& target) { return nn::functional::cross_entropy(y, target); };
  return t;
}

// A two-layer GPT with dropout (the fused attention, cuBLASLt, layer norms, embeddings).
Training gpt() {
  manual_seed(12);
  Training t;
  models::GPTConfig c{.vocab_size = 65, .block_size = 32, .n_layer = 2, .n_head = 2, .n_embd = 64, .dropout = 0.1};
  models::GPT gpt(c);
  // The embeddings' gradient adds rows with atomics (index_add), in an order
  // that varies from run to run, captured or not: frozen, so that the rest
  // of the step can be compared bit for bit (the first GPU run saw their
  // last bits differ between two uncaptured runs' worth of steps).
  gpt->wte->weight.requires_grad_(false);
  gpt->wpe->weight.requires_grad_(false);
  t.model = gpt;
  t.model->to(gpu_device());
  t.optimizer = std::make_unique<optim::AdamW>(t.model->parameters(),
                                               optim::AdamOptions{.lr = 3e-3, .capturable = true});
  t.input = randint(0, 65, {4, 32}, {.dtype = kInt64, .device = gpu_device()});
  t.target = randint(0, 65, {4, 32}, {.dtype = kInt64, .device = gpu_device()});
  t.loss = [](const Tensor& y, const Tensor& target) {
    return nn::functional::cross_entropy(y.reshape({-1, 65}), target.reshape({-1}));
  };
  return t;
}

// The GPT under float16 autocast with a capturable GradScaler that grows
// its scale after every good step: it climbs until float16 gradients
// overflow, then each overflow halves it, so the replays must skip steps and
// grow on the device as the eager steps do.
Training gpt_fp16_scaled() {
  Training t = gpt();
  t.autocast = kFloat16;
  t.scaler = std::make_shared<optim::GradScaler>(
      optim::GradScalerOptions{.init_scale = 1 << 20, .growth_interval = 1, .capturable = true});
  return t;
}

// The GPT with its blocks' Linear layers in float8 under bf16 autocast.
Training gpt_fp8() {
  Training t = gpt();
  nn::convert_to_float8_training(*t.model, [](const std::string& name, const nn::LinearImpl&) { return name != "head"; });
  t.autocast = kBFloat16;
  return t;
}

// Warm-up steps, then `steps` uncaptured steps of one copy against a
// capture and `steps` replays of another made alike: the same losses,
// parameters and loss scales, bit for bit, and the generator left at the
// same offset. Returns the eager steps' loss scales.
std::vector<double> expect_replays_equal_eager_steps(const std::function<Training()>& make, int steps) {
  constexpr int kWarmup = 2;
  Training eager = make();
  std::vector<double> eager_losses, eager_scales;
  for (int i = 0; i < kWarmup; ++i) eager.step();
  for (int i = 0; i < steps; ++i) {
    eager_losses.push_back(eager.step().item());
    eager_scales.push_back(eager.scaler->get_scale());
  }
  const uint64_t eager_offset = default_generator().state().offset;

  Training captured = make();
  for (int i = 0; i < kWarmup; ++i) captured.step();
  DeviceGraph graph(gpu_device());
  Tensor loss;
  graph.capture([&] { loss = captured.step(); });
  std::vector<double> replay_losses, replay_scales;
  for (int i = 0; i < steps; ++i) {
    graph.replay();
    replay_losses.push_back(loss.item());
    replay_scales.push_back(captured.scaler->get_scale());
  }
  EXPECT_EQ(replay_losses, eager_losses);
  EXPECT_EQ(replay_scales, eager_scales);
  EXPECT_EQ(parameter_values(captured.model), parameter_values(eager.model));
  EXPECT_EQ(default_generator().state().offset, eager_offset) << "each replay takes the offsets a step takes";
  EXPECT_NE(replay_losses.front(), replay_losses.back()) << "the replays did train";
  return eager_scales;
}

TEST(CudaGraph, ReplayedAdamWStepsWithDropoutEqualUncapturedStepsBitForBit) {
  LOOM_REQUIRE_CUDA();
  expect_replays_equal_eager_steps([] { return mlp(false); }, 5);
}

TEST(CudaGraph, ReplayedSgdMomentumStepsEqualUncapturedStepsBitForBit) {
  LOOM_REQUIRE_CUDA();
  expect_replays_equal_eager_steps([] { return mlp(true); }, 5);
}

TEST(CudaGraph, ReplayedGptStepsEqualUncapturedStepsBitForBit) {
  LOOM_REQUIRE_CUDA();
  nn::functional::set_deterministic_attention(true);  // the atomic dq's last bits vary from run to run
  expect_replays_equal_eager_steps(gpt, 4);
  nn::functional::set_deterministic_attention(false);
}

TEST(CudaGraph, ReplayedFloat16StepsWithAGradScalerSkipAndHalveAsUncapturedSteps) {
  LOOM_REQUIRE_CUDA();
  nn::functional::set_deterministic_attention(true);
  const std::vector<double> scales = expect_replays_equal_eager_steps(gpt_fp16_scaled, 8);
  nn::functional::set_deterministic_attention(false);
  bool halved = false, grew = false;
  for (size_t i = 1; i < scales.size(); ++i) {
    halved = halved || scales[i] < scales[i - 1];
    grew = grew || scales[i] > scales[i - 1];
  }
  EXPECT_TRUE(halved && grew) << "the steps compared must include skipped (halving) and good (growing) ones; "
                              << "the scale went " << ::testing::PrintToString(scales);
}

TEST(CudaGraph, ReplayedFloat8StepsEqualUncapturedStepsBitForBit) {
  LOOM_REQUIRE_CUDA();
  nn::functional::set_deterministic_attention(true);
  expect_replays_equal_eager_steps(gpt_fp8, 4);
  nn::functional::set_deterministic_attention(false);
}

TEST(CudaGraph, ReplaysDrawTheNumbersUncapturedDrawsWouldAndNewOnesEachTime) {
  LOOM_REQUIRE_CUDA();
  manual_seed(3);
  std::vector<std::vector<double>> eager;
  for (int i = 0; i < 3; ++i) eager.push_back(values(rand({1000}, {.device = gpu_device()})));

  manual_seed(3);
  Tensor out = empty({1000}, {.device = gpu_device()});
  DeviceGraph graph(gpu_device());
  graph.capture([&] { out.copy_(rand({1000}, {.device = gpu_device()})); });
  for (int i = 0; i < 3; ++i) {
    graph.replay();
    EXPECT_EQ(values(out), eager[i]) << "replay " << i;
  }
  // A seed set between replays is the one the next replay uses.
  manual_seed(4);
  const std::vector<double> reseeded = values(rand({1000}, {.device = gpu_device()}));
  manual_seed(4);
  graph.replay();
  EXPECT_EQ(values(out), reseeded);
}

TEST(CudaGraph, ReplaysAllocateNothingAndUseTheSameMemory) {
  LOOM_REQUIRE_CUDA();
  Training t = mlp(false);
  t.step();
  DeviceGraph graph(gpu_device());
  Tensor loss;
  graph.capture([&] { loss = t.step(); });
  graph.replay();
  synchronize(gpu_device());
  const MemoryStats before = memory_stats(gpu_device());
  for (int i = 0; i < 10; ++i) graph.replay();
  synchronize(gpu_device());
  const MemoryStats after = memory_stats(gpu_device());
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
}

TEST(CudaGraph, ALearningRateSetBetweenReplaysIsUsed) {
  LOOM_REQUIRE_CUDA();
  // No dropout: the two copies draw from one generator, in turn.
  Training eager = mlp(true, 0), captured = mlp(true, 0);
  eager.step();
  captured.step();
  DeviceGraph graph(gpu_device());
  graph.capture([&] { captured.step(); });
  for (double lr : {0.05, 0.01, 0.2}) {
    eager.optimizer->set_lr(lr);
    captured.optimizer->set_lr(lr);
    eager.step();
    graph.replay();
  }
  EXPECT_EQ(parameter_values(captured.model), parameter_values(eager.model));
}

// The message of the loom::Error that `capture` throws.
std::string capture_error(const std::function<void()>& work) {
  DeviceGraph graph(gpu_device());
  try {
    graph.capture(work);
  } catch (const Error& e) {
    EXPECT_FALSE(graph.captured());
    return e.what();
  }
  ADD_FAILURE() << "the capture succeeded";
  return "";
}

TEST(CudaGraph, AHostWaitInsideTheCaptureIsAnErrorNamingIt) {
  LOOM_REQUIRE_CUDA();
  Tensor x = ones({8}, {.device = gpu_device()});
  std::string message = capture_error([&] { (x * 2).sum().item(); });
  EXPECT_NE(message.find("item()"), std::string::npos) << message;
  EXPECT_NE(message.find("capturing a CUDA graph"), std::string::npos) << message;
  message = capture_error([&] { synchronize(gpu_device()); });
  EXPECT_NE(message.find("synchronize()"), std::string::npos) << message;
  // The device works on, and the next capture succeeds.
  EXPECT_EQ(values(x * 3), std::vector<double>(8, 3.0));
  Tensor y = empty({8}, {.device = gpu_device()});
  DeviceGraph graph(gpu_device());
  graph.capture([&] { y.copy_(x * 5); });
  graph.replay();
  EXPECT_EQ(values(y), std::vector<double>(8, 5.0));
}

TEST(CudaGraph, TimingCudnnAlgorithmsForAShapeFirstMetInsideTheCaptureIsRefused) {
  LOOM_REQUIRE_CUDA();
  set_cudnn_benchmark(true);
  Tensor x = randn({2, 3, 17, 13}, {.device = gpu_device()}), w = randn({5, 3, 3, 3}, {.device = gpu_device()});
  nn::functional::conv2d(x.narrow(0, 0, 1), w);  // another shape: this thread's cuDNN handle exists
  const std::string message = capture_error([&] { nn::functional::conv2d(x, w); });
  set_cudnn_benchmark(false);
  EXPECT_NE(message.find("cuDNN's timing"), std::string::npos) << message;
}

TEST(CudaGraph, AThreadsFirstLibraryCallInsideTheCaptureIsRefusedByName) {
  LOOM_REQUIRE_CUDA();
  std::string message;
  std::thread fresh([&] {  // a thread with no cuBLAS handle yet
    Tensor a = randn({8, 8}, {.device = gpu_device()});
    message = capture_error([&] { a.matmul(a); });
  });
  fresh.join();
  EXPECT_NE(message.find("library handle"), std::string::npos) << message;
}

TEST(CudaGraph, ACopyFromTheHostInsideTheCaptureIsRefused) {
  LOOM_REQUIRE_CUDA();
  Tensor y = empty({8}, {.device = gpu_device()});
  const std::string message = capture_error([&] { y.copy_(ones({8})); });
  EXPECT_NE(message.find("from the host"), std::string::npos) << message;
}

TEST(CudaGraph, AnOptimizerThatCannotReplayItsStepIsRefused) {
  LOOM_REQUIRE_CUDA();
  manual_seed(1);
  nn::Linear layer(8, 4);
  layer->to(gpu_device());
  Tensor x = randn({2, 8}, {.device = gpu_device()});
  optim::AdamW host_driven(layer->parameters());
  layer->forward(x).sum().backward();
  host_driven.step();
  std::string message = capture_error([&] { host_driven.step(); });
  EXPECT_NE(message.find("capturable = true"), std::string::npos) << message;

  optim::AdamW fresh(layer->parameters(), {.capturable = true});  // no state yet: no warm-up step
  message = capture_error([&] { fresh.step(); });
  EXPECT_NE(message.find("warm-up"), std::string::npos) << message;
}

}  // namespace
}  // namespace loom
