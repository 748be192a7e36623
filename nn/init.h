// Parameter initialisation, in place, matching PyTorch's torch.nn.init.
//
//   nn::init::kaiming_uniform_(weight, std::sqrt(5.0));   // nn.Linear's default
//   nn::init::normal_(embedding, 0, 1, &generator);
#pragma once

#include "tensor/generator.h"
#include "tensor/tensor.h"

namespace loom::nn::init {

// For a weight (out, in, k...): fan_in = in * prod(k), fan_out = out * prod(k).
int64_t fan_in(const Tensor& t);
int64_t fan_out(const Tensor& t);

void uniform_(Tensor t, double low, double high, Generator* generator = nullptr);
void normal_(Tensor t, double mean, double stddev, Generator* generator = nullptr);
void constant_(Tensor t, double value);
void zeros_(Tensor t);
void ones_(Tensor t);
// He initialisation for a leaky ReLU of negative slope `a`, fan-in mode:
// uniform(-b, b) with b = sqrt(2 / (1 + a^2)) * sqrt(3 / fan_in).
void kaiming_uniform_(Tensor t, double a = 0, Generator* generator = nullptr);
// Glorot: uniform(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(Tensor t, double gain = 1, Generator* generator = nullptr);

}  // namespace loom::nn::init
