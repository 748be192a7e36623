// gradcheck: compares autograd's gradients with central finite differences.
//
// The inputs must be float64 CPU leaves that require grad. For a random
// vector v of the output's shape it checks, for every input element x_i,
//   (v . fn(x + eps e_i) - v . fn(x - eps e_i)) / 2 eps  ==  (v^T J)_i
// where v^T J comes from backward. A random v makes a wrong Jacobian entry
// show up with probability 1.
//
//   Tensor x = randn({3, 4}, {.dtype = kFloat64, .requires_grad = true});
//   GradcheckResult r = gradcheck([](const TensorList& in) { return tanh(in[0]); }, {x});
//   EXPECT_TRUE(r.ok) << r.message;
#pragma once

#include <functional>
#include <string>

#include "tensor/tensor.h"

namespace loom::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 0;  // for the projection vector v
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch, naming input, element and both values
};

GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& options = {});

}  // namespace loom::autograd
