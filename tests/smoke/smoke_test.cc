#include <gtest/gtest.h>
#include <iostream>
#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "tensor/ops.h"
using namespace loom;
TEST(Smoke, Works) {
  Tensor w = randn({3, 4}, {.requires_grad = true});
  Tensor x = ones({2, 3});
  Tensor loss = x.matmul(w).relu().sum();
  loss.backward();
  std::cout << w << "\n" << w.grad() << "\n" << loss << "\n";
  Tensor a = arange(12, {.dtype=kFloat64}).reshape({3,4});
  std::cout << a.t() << "\n" << a.sum({0}) << a.softmax(1) << "\n";
  auto r = autograd::gradcheck([](const TensorList& in){ return tanh(in[0]).matmul(in[1].t()); },
     {randn({3,4},{.dtype=kFloat64,.requires_grad=true}), randn({5,4},{.dtype=kFloat64,.requires_grad=true})});
  EXPECT_TRUE(r.ok) << r.message;
}
