// Tensor handles, creation, dtypes, data access, printing and views.
#include <gtest/gtest.h>

#include <sstream>

#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;
using testing::values;

TEST(Tensor, DefaultIsUndefinedAndSaysSo) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_THROW_MSG(t.shape(), "the tensor is undefined");
}

TEST(Tensor, CreationFunctions) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), kFloat32);
  EXPECT_EQ(z.device(), Device::cpu());
  expect_values(z, std::vector<double>(6, 0.0));
  expect_values(ones({2}, {.dtype = kInt64}), {1, 1});
  expect_values(full({3}, 2.5, {.dtype = kFloat64}), {2.5, 2.5, 2.5});
  expect_values(arange(0, 1, 0.25), {0, 0.25, 0.5, 0.75});
  expect_values(arange(4), {0, 1, 2, 3});
  EXPECT_EQ(arange(4).dtype(), kInt64);
  Tensor v = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.shape(), (Shape{2, 3}));
  EXPECT_FLOAT_EQ(v.data_ptr<float>()[4], 5.0f);
  Tensor b = from_vector<bool>({true, false});
  EXPECT_EQ(b.dtype(), kBool);
  expect_values(b, {1, 0});
  EXPECT_THROW_MSG(from_vector<float>({1, 2, 3}, {2, 2}), "from_vector: 3 values do not fill shape [2, 2]");
  EXPECT_THROW_MSG(zeros({2, -1}), "negative size");
  EXPECT_THROW_MSG(arange(0, 5, 0), "step must be nonzero");
}

TEST(Tensor, ItemAndDtypeChecks) {
  EXPECT_DOUBLE_EQ(full({}, 3.5).item(), 3.5);
  EXPECT_EQ(full({1, 1}, 7, {.dtype = kInt64}).item<int64_t>(), 7);
  EXPECT_THROW_MSG(zeros({2}).item(), "item: the tensor has 2 elements");
  EXPECT_THROW_MSG(zeros({2}).data_ptr<double>(), "data_ptr: the tensor is float32, not float64");
}

TEST(Tensor, ConversionBetweenDtypes) {
  Tensor x = from_vector<float>({-1.5f, 0.0f, 2.7f});
  expect_values(x.to(kInt64), {-1, 0, 2});  // truncation, as C++ casts
  expect_values(x.to(kBool), {1, 0, 1});
  expect_values(x.to(kFloat64), {-1.5, 0.0, 2.7}, 1e-6);
  EXPECT_EQ(x.to(kFloat32).impl(), x.impl());  // no-op conversions return the same tensor
}

TEST(Tensor, PrintsLikePyTorch) {
  std::ostringstream out;
  out << from_vector<float>({1, -2, 3, 4}, {2, 2});
  EXPECT_EQ(out.str(),
            "tensor([[ 1.0000, -2.0000],\n"
            "        [ 3.0000,  4.0000]], shape=[2, 2], dtype=float32, device=cpu)");
  std::ostringstream ints;
  ints << arange(3);
  EXPECT_EQ(ints.str(), "tensor([0, 1, 2], shape=[3], dtype=int64, device=cpu)");
  std::ostringstream big;
  big << zeros({2000});
  EXPECT_NE(big.str().find("..."), std::string::npos);  // summarised
  std::ostringstream grad;
  grad << zeros({1}).requires_grad_();
  EXPECT_NE(grad.str().find("requires_grad=true"), std::string::npos);
}

TEST(Views, ShareStorageWithTheirBase) {
  Tensor x = arange(0, 6, 1).reshape({2, 3});
  Tensor row = x.select(0, 1);
  expect_values(row, {3, 4, 5});
  {
    NoGradGuard no_grad;
    row.fill_(9);
  }
  expect_values(x, {0, 1, 2, 9, 9, 9});
  EXPECT_EQ(row.storage(), x.storage());
}

TEST(Views, TransposePermuteAreStridesOnly) {
  Tensor x = arange(0, 24, 1).reshape({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.storage(), x.storage());
  // p[a][b][c] == x[b][c][a]
  Tensor pc = p.contiguous();
  EXPECT_TRUE(pc.is_contiguous());
  std::vector<double> xv = values(x), pv = values(pc);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(pv[a * 6 + b * 3 + c], xv[b * 12 + c * 4 + a]);
  expect_values(x.transpose(0, 2).transpose(0, 2), values(x));
  EXPECT_THROW_MSG(x.permute({0, 0, 1}), "permute: dimension 0 appears twice");
  EXPECT_THROW_MSG(x.t(), "t: expected a tensor of at most 2 dimensions");
}

TEST(Views, ViewNeedsCompatibleStridesReshapeCopies) {
  Tensor x = arange(0, 6, 1).reshape({2, 3});
  Tensor xt = x.t();
  EXPECT_THROW_MSG(xt.view({6}), "view: shape [6] cannot view a tensor of shape [3, 2]");
  Tensor r = xt.reshape({6});
  expect_values(r, {0, 3, 1, 4, 2, 5});
  EXPECT_NE(r.storage(), x.storage());                          // had to copy
  EXPECT_EQ(x.reshape({3, 2}).storage(), x.storage());          // no copy needed
  EXPECT_EQ(x.unsqueeze(1).view({2, 3}).storage(), x.storage());  // size-1 dims are free
  EXPECT_EQ(x.view({-1}).shape(), (Shape{6}));
  EXPECT_EQ(x.flatten().shape(), (Shape{6}));
  EXPECT_EQ(zeros({2, 3, 4}).flatten(1).shape(), (Shape{2, 12}));
}

TEST(Views, NarrowSliceSelect) {
  Tensor x = arange(0, 10, 1);
  expect_values(x.narrow(0, 2, 3), {2, 3, 4});
  expect_values(x.slice(0, 1, 8, 3), {1, 4, 7});
  expect_values(x.slice(0, -3, 100), {7, 8, 9});  // Python slicing clamps
  EXPECT_DOUBLE_EQ(x.select(0, -1).item(), 9);
  EXPECT_THROW_MSG(x.narrow(0, 8, 5), "narrow: [8, 13) is out of range for dimension 0 of size 10");
  EXPECT_THROW_MSG(x.select(0, 10), "select: index 10 is out of range for dimension 0 of size 10");
  EXPECT_THROW_MSG(x.slice(0, 0, 5, 0), "slice: step must be positive");
}

TEST(Views, ExpandSqueezeUnsqueeze) {
  Tensor x = from_vector<float>({1, 2, 3}, {3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.stride(2), 0);
  expect_values(e.select(0, 1).select(1, 3), {1, 2, 3});
  EXPECT_EQ(x.expand({-1, 5}).shape(), (Shape{3, 5}));
  EXPECT_THROW_MSG(x.expand({4, 4}), "expand: the tensor's shape [3, 1] cannot be expanded to [4, 4]");
  EXPECT_EQ(zeros({1, 3, 1}).squeeze().shape(), (Shape{3}));
  EXPECT_EQ(zeros({1, 3, 1}).squeeze(0).shape(), (Shape{3, 1}));
  EXPECT_EQ(zeros({2, 3}).squeeze(0).shape(), (Shape{2, 3}));  // not size 1: unchanged
  EXPECT_EQ(zeros({2, 3}).unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(zeros({2, 3}).unsqueeze(0).shape(), (Shape{1, 2, 3}));
}

TEST(Views, CatStackSplitChunk) {
  Tensor a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector<float>({5, 6}, {1, 2});
  expect_values(cat({a, b}, 0), {1, 2, 3, 4, 5, 6});
  expect_values(cat({a, a}, 1), {1, 2, 1, 2, 3, 4, 3, 4});
  EXPECT_EQ(stack({a, a}, 1).shape(), (Shape{2, 2, 2}));
  expect_values(stack({a, a * 2.0}, 0).select(0, 1), {2, 4, 6, 8});
  EXPECT_EQ(cat({a, from_vector<double>({7, 8}, {1, 2})}, 0).dtype(), kFloat64);  // promotes
  TensorList parts = split(arange(0, 7, 1), 3);
  ASSERT_EQ(parts.size(), 3u);
  expect_values(parts[2], {6});
  TensorList chunks = chunk(arange(0, 6, 1), 3);
  ASSERT_EQ(chunks.size(), 3u);
  expect_values(chunks[1], {2, 3});
  EXPECT_THROW_MSG(cat({a, zeros({2, 3})}, 0), "cat: tensor 1 has shape [2, 3], which differs from tensor 0's [2, 2]");
  EXPECT_THROW_MSG(split(a, {1, 2}, 0), "split: sizes [1, 2] add up to 3, but dimension 0 has size 2");
  EXPECT_THROW_MSG(stack({a, b}), "stack: tensor 1 has shape [1, 2] but tensor 0 has shape [2, 2]");
}

TEST(Devices, ParseAndErrors) {
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_THROW_MSG(Device::parse("gpu"), "invalid device 'gpu'");
  // The index is checked as written, never after wrapping into an int.
  EXPECT_THROW_MSG(Device::parse("cuda:99999999999"),
                   "invalid device 'cuda:99999999999': a CUDA device index is from 0 to 127");
  EXPECT_THROW_MSG(Device::parse("cuda:128"), "a CUDA device index is from 0 to 127");
  EXPECT_THROW_MSG(Device::parse("cuda:-1"), "invalid device 'cuda:-1': expected cpu, cuda or cuda:N");
  EXPECT_THROW_MSG(Device::parse("cuda:+1"), "expected cpu, cuda or cuda:N");
  EXPECT_EQ(Device::parse("cuda:127"), Device::cuda(127));
}

TEST(Devices, MixingDevicesIsAnErrorNamingBoth) {
  if (!cuda_available()) {
    // Without a GPU a CUDA tensor cannot even be made; the error says why.
    EXPECT_THROW(zeros({2}, {.device = Device::cuda(0)}), Error);
    return;
  }
  Tensor a = zeros({2}), b = zeros({2}, {.device = Device::cuda(0)});
  EXPECT_THROW_MSG(a + b, "add: expected all tensors on the same device, got cpu and cuda:0");
}

}  // namespace
}  // namespace loom
