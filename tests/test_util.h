// Helpers shared by loom's tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tensor/ops.h"

// Expects `statement` to throw loom::Error whose message contains `substring`.
#define EXPECT_THROW_MSG(statement, substring)                                        \
  do {                                                                                \
    try {                                                                             \
      statement;                                                                      \
      ADD_FAILURE() << "expected loom::Error containing \"" << (substring)            \
                    << "\", but nothing was thrown";                                  \
    } catch (const loom::Error& e) {                                                  \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)             \
          << "the error message \"" << e.what() << "\" does not contain \""           \
          << (substring) << "\"";                                                     \
    }                                                                                 \
  } while (0)

namespace loom::testing {

// Skips the test, with a message, on machines without a usable GPU.
#define LOOM_REQUIRE_CUDA()                                                               \
  do {                                                                                    \
    if (!::loom::cuda_available())                                                        \
      GTEST_SKIP() << "no CUDA device (or loom built without CUDA): GPU test skipped";   \
  } while (0)

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Max |a - b| / max(1, |b|) over all elements; shapes must match. NaN
// against NaN and equal infinities agree; NaN against a number, and an
// infinity against anything else, are infinitely far apart.
inline double max_rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  std::vector<double> x = values(a), y = values(b);
  double worst = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (std::isnan(x[i]) != std::isnan(y[i])) return INFINITY;
    if (std::isnan(x[i]) || x[i] == y[i]) continue;
    if (std::isinf(x[i]) || std::isinf(y[i])) return INFINITY;
    worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  }
  return worst;
}

inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size()) << "shape " << t.shape();
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == expected[i]) continue;  // also equal infinities
    EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::abs(expected[i]))) << "element " << i;
  }
}

// A float64 tensor of standard normals that requires grad, for gradchecks.
inline Tensor leaf64(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, {.dtype = kFloat64}, &g).requires_grad_();
}

// Element i of a contiguous copy, as double.
inline double at(const Tensor& t, int64_t i) { return values(t)[i]; }

}  // namespace loom::testing
