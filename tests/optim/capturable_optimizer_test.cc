// Capturable optimizers (optim/optimizer.h) keep the learning rate and step
// count on the parameters' device so that a CUDA graph can replay their
// steps. On the CPU they run the same bookkeeping in host memory: each must
// step exactly like its host-driven twin, through learning-rate changes and
// a checkpoint, and a capture must refuse what it could not replay.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "nn/nn.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "tensor/device_graph.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::values;

// Two parameters (a matrix and a vector) with fixed gradients that change each step.
struct Params {
  Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, {2, 3}).requires_grad_();
  Tensor b = from_vector<float>({0.1f, -0.2f}).requires_grad_();
  TensorList list() const { return {w, b}; }
  void set_grads(int step) const {
    const float s = static_cast<float>(step + 1);
    w.set_grad(from_vector<float>({0.3f * s, -0.1f, 0.2f / s, -0.4f, 0.05f * s, 1.0f}, {2, 3}));
    b.set_grad(from_vector<float>({-0.5f / s, 0.25f * s}));
  }
};

// Steps `twin` and `capturable` alike, halving the learning rate at step 3.
template <typename Make>
void expect_same_steps(const Make& make) {
  Params host, device;
  std::unique_ptr<optim::Optimizer> twin = make(host.list(), false);
  std::unique_ptr<optim::Optimizer> capturable = make(device.list(), true);
  ASSERT_TRUE(capturable->capturable());
  for (int step = 0; step < 6; ++step) {
    if (step == 3) {
      twin->set_lr(twin->lr() / 2);
      capturable->set_lr(capturable->lr() / 2);
    }
    host.set_grads(step);
    device.set_grads(step);
    twin->step();
    capturable->step();
    EXPECT_EQ(values(device.w), values(host.w)) << "step " << step;
    EXPECT_EQ(values(device.b), values(host.b)) << "step " << step;
  }
  // The saved step counts are the device's, and equal the twin's.
  const nn::NamedTensors a = twin->state_dict(), b = capturable->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(values(a[i].second), values(b[i].second)) << a[i].first;
  }
  // And a capturable optimizer resumes from the twin's checkpoint exactly.
  capturable->load_state_dict(a);
  host.set_grads(7);
  device.set_grads(7);
  twin->step();
  capturable->step();
  EXPECT_EQ(values(device.w), values(host.w)) << "after load_state_dict";
}

TEST(CapturableOptimizer, AdamStepsAsTheHostDrivenOne) {
  expect_same_steps([](TensorList p, bool capturable) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1,
                                                               .capturable = capturable});
  });
}

TEST(CapturableOptimizer, AdamWStepsAsTheHostDrivenOne) {
  expect_same_steps([](TensorList p, bool capturable) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(p, optim::AdamOptions{.lr = 0.02, .beta2 = 0.99, .weight_decay = 0.01,
                                                                .capturable = capturable});
  });
}

TEST(CapturableOptimizer, SgdWithMomentumStepsAsTheHostDrivenOne) {
  expect_same_steps([](TensorList p, bool capturable) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true,
                                                             .capturable = capturable});
  });
}

TEST(CapturableOptimizer, ASchedulerDrivesTheDeviceLearningRate) {
  Params host, device;
  optim::SGD twin(host.list(), {.lr = 0.1});
  optim::SGD capturable(device.list(), {.lr = 0.1, .capturable = true});
  optim::CosineAnnealingLR a(twin, 5, 0.01), b(capturable, 5, 0.01);
  for (int step = 0; step < 5; ++step) {
    host.set_grads(step);
    device.set_grads(step);
    twin.step();
    capturable.step();
    a.step();
    b.step();
    EXPECT_EQ(values(device.w), values(host.w)) << "step " << step;
  }
}

TEST(CapturableOptimizer, ParametersWithDifferentStepCountsAreRefused) {
  Params p;
  optim::Adam opt(p.list(), {.capturable = true});
  p.w.set_grad(ones({2, 3}));  // b has no gradient: only w steps
  opt.step();
  p.set_grads(1);
  EXPECT_THROW(
      {
        try {
          opt.step();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("different numbers of steps"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

// The CPU cannot capture (there is no launch to save): the errors a user of
// DeviceGraph meets there say so.
TEST(DeviceGraph, IsRefusedOnTheCpuWithAReason) {
  try {
    DeviceGraph graph(Device::cpu());
    FAIL() << "a CPU graph was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("need a CUDA device"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(capturing_device_graph());
}

}  // namespace
}  // namespace loom
