#include "nn/init.h"

#include <cmath>

#include "tensor/ops.h"

namespace loom::nn::init {
namespace {

int64_t receptive_field(const Tensor& t) {
  int64_t r = 1;
  for (int d = 2; d < t.dim(); ++d) r *= t.size(d);
  return r;
}

void fill_from(Tensor t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
}

}  // namespace

int64_t fan_in(const Tensor& t) {
  LOOM_CHECK(t.dim() >= 2, "init: fan in/out needs a tensor of at least 2 dims, got shape ", t.shape());
  return t.size(1) * receptive_field(t);
}

int64_t fan_out(const Tensor& t) {
  LOOM_CHECK(t.dim() >= 2, "init: fan in/out needs a tensor of at least 2 dims, got shape ", t.shape());
  return t.size(0) * receptive_field(t);
}

void uniform_(Tensor t, double low, double high, Generator* generator) {
  fill_from(t, uniform(t.shape(), low, high, {.dtype = t.dtype(), .device = t.device()}, generator));
}

void normal_(Tensor t, double mean, double stddev, Generator* generator) {
  fill_from(t, normal(t.shape(), mean, stddev, {.dtype = t.dtype(), .device = t.device()}, generator));
}

void constant_(Tensor t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
}

void zeros_(Tensor t) { constant_(t, 0); }
void ones_(Tensor t) { constant_(t, 1); }

void kaiming_uniform_(Tensor t, double a, Generator* generator) {
  const double gain = std::sqrt(2.0 / (1 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(t)));
  uniform_(t, -bound, bound, generator);
}

void xavier_uniform_(Tensor t, double gain, Generator* generator) {
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in(t) + fan_out(t)));
  uniform_(t, -bound, bound, generator);
}

}  // namespace loom::nn::init
