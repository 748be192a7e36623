// In-place ops: results, version counting, and the errors that keep autograd honest.
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;

TEST(InPlace, ArithmeticResults) {
  Tensor x = from_vector<float>({1, 2, 3});
  x.add_(from_vector<float>({1, 1, 1}), 2.0);
  expect_values(x, {3, 4, 5});
  x.sub_(full({}, 1.0));
  expect_values(x, {2, 3, 4});
  x.mul_(0.5);
  expect_values(x, {1, 1.5, 2});
  x.div_(from_vector<float>({1, 3, 4}));
  expect_values(x, {1, 0.5, 0.5});
  x.addcmul_(from_vector<float>({2, 2, 2}), from_vector<float>({1, 2, 3}), 0.5);
  expect_values(x, {2, 2.5, 3.5});
  x.addcdiv_(from_vector<float>({1, 1, 1}), from_vector<float>({2, 4, 8}), 2.0);
  expect_values(x, {3, 3, 3.75});
  x.lerp_(from_vector<float>({5, 5, 5}), 0.5);
  expect_values(x, {4, 4, 4.375});
  x.clamp_(0, 4.1);
  expect_values(x, {4, 4, 4.1});
  x.sqrt_();
  expect_values(x, {2, 2, std::sqrt(4.1)});
  x.zero_();
  expect_values(x, {0, 0, 0});
  x.fill_(7);
  expect_values(x, {7, 7, 7});
  x.masked_fill_(from_vector<bool>({false, true, false}), -1);
  expect_values(x, {7, -1, 7});
}

TEST(InPlace, CopyBroadcastsAndConverts) {
  Tensor x = zeros({2, 3});
  x.copy_(from_vector<int64_t>({1, 2, 3}));
  expect_values(x, {1, 2, 3, 1, 2, 3});
  Tensor col = x.select(1, 0);  // a strided destination
  col.copy_(from_vector<double>({9, 8}));
  expect_values(x, {9, 2, 3, 8, 2, 3});
  EXPECT_THROW_MSG(x.copy_(zeros({3, 3})), "copy_: source of shape [3, 3] does not broadcast");
}

TEST(InPlace, OverlappingOperandIsReadBeforeWritten) {
  Tensor x = arange(0, 4, 1).reshape({2, 2});
  x.add_(x.t());  // x + x^T, not a half-updated mix
  expect_values(x, {0, 3, 3, 6});
}

TEST(InPlace, BumpsVersion) {
  Tensor x = zeros({3});
  uint32_t v = x.version();
  x.add_(1.0);
  EXPECT_EQ(x.version(), v + 1);
  Tensor view = x.narrow(0, 0, 1);
  view.mul_(2.0);
  EXPECT_EQ(x.version(), v + 2);  // views share the counter
}

TEST(InPlace, Errors) {
  Tensor w = ones({2}).requires_grad_();
  EXPECT_THROW_MSG(w.add_(1.0), "add_: in-place operations on tensors that require grad are not recorded");
  {
    NoGradGuard no_grad;  // what optimizers do
    w.add_(1.0);
  }
  expect_values(w, {2, 2});
  Tensor x = zeros({2});
  EXPECT_THROW_MSG(x.add_(w), "add_: in-place operations on tensors that require grad");
  Tensor e = zeros({1}).expand({3});
  EXPECT_THROW_MSG(e.add_(1.0), "add_: cannot write in place into a tensor whose elements share memory");
  EXPECT_THROW_MSG(zeros({2}).add_(zeros({3, 2})), "add_: an operand of shape [3, 2] does not broadcast");
  EXPECT_THROW_MSG(arange(3).add_(0.5), "add_: cannot write a float32 result into a int64 tensor");
  EXPECT_THROW_MSG(arange(3).div_(2.0), "div_: expected a floating-point tensor, got int64");
}

}  // namespace
}  // namespace loom
