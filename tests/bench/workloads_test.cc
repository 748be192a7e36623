// The benchmark harness's own numbers: the cnn's FLOP count (which the
// GEMM-fraction line divides by) and the malloc counter.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "bench/malloc_counter.h"
#include "bench/workloads.h"
#include "nn/nn.h"

namespace loom {
namespace {

// The cnn's training FLOPs counted from the model itself: every Conv2d and
// Linear does (output elements) x (weight elements per output channel)
// multiply-adds forward, as many for its weight gradient, and as many for
// its input gradient unless its input is the images.
TEST(Workloads, CnnFlopsMatchTheModelsLayers) {
  manual_seed(0);
  bench::Workload w = bench::make_workload("cnn", Device::cpu());
  auto* net = dynamic_cast<nn::SequentialImpl*>(w.model.get());
  ASSERT_NE(net, nullptr);
  NoGradGuard no_grad;
  Tensor x = w.input;
  double flops = 0;
  bool first = true;
  for (size_t i = 0; i < net->size(); ++i) {
    nn::ModulePtr layer = (*net)[i];
    Tensor y = layer->forward(x);
    Tensor weight;
    if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(layer.get())) weight = conv->weight;
    if (auto* linear = dynamic_cast<nn::LinearImpl*>(layer.get())) weight = linear->weight;
    if (weight.defined()) {
      const double macs = double(y.numel()) * double(weight.numel() / weight.size(0));
      flops += 2 * macs * (first ? 2 : 3);
      first = false;
    }
    x = y;
  }
  EXPECT_DOUBLE_EQ(w.flops_per_step, flops);
  EXPECT_GT(flops, 6e9);  // about 6.4 GFLOP
}

// Where the test's pointers escape to, so the compiler cannot drop an
// allocation it can see is freed unused.
void* volatile sink;

TEST(MallocCounter, CountsEveryAllocationFunction) {
  const int64_t before = bench::malloc_calls();
  void* a = sink = std::malloc(100);
  void* b = sink = std::calloc(10, 10);
  b = sink = std::realloc(b, 1000);
  void* c = sink = std::aligned_alloc(64, 128);
  void* d = nullptr;
  ASSERT_EQ(posix_memalign(&d, 256, 300), 0);
  auto e = std::make_unique<std::vector<double>>(1000);  // operator new, through libstdc++
  sink = e->data();
  EXPECT_GE(bench::malloc_calls() - before, 7);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);
  std::free(a);
  std::free(b);
  std::free(c);
  std::free(d);
  const int64_t after_frees = bench::malloc_calls();
  sink = std::malloc(8);
  std::free(sink);
  EXPECT_EQ(bench::malloc_calls() - after_frees, 1);  // frees are not counted
}

}  // namespace
}  // namespace loom
