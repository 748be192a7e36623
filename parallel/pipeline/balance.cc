#include "parallel/pipeline/balance.h"

#include <algorithm>
#include <limits>

#include "autograd/engine.h"
#include "autograd/split_backward.h"
#include "tensor/generator.h"
#include "tensor/backend.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {

std::vector<int> balanced_boundaries(const std::vector<double>& costs, int parts) {
  const int n = static_cast<int>(costs.size());
  LOOM_CHECK(parts >= 1 && parts <= n, "balanced_boundaries: cannot cut ", n, " layers into ", parts,
             " parts of at least one layer each");
  for (double c : costs) LOOM_CHECK(c >= 0, "balanced_boundaries: a cost is negative (", c, ")");
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // worst[k][i]: the smallest largest sum of the first i costs in k runs;
  // begin[k][i]: where the last of those runs begins.
  const double infinity = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> worst(parts + 1, std::vector<double>(n + 1, infinity));
  std::vector<std::vector<int>> begin(parts + 1, std::vector<int>(n + 1, 0));
  worst[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        const double candidate = std::max(worst[k - 1][j], prefix[i] - prefix[j]);
        if (candidate < worst[k][i]) {  // strict: the earliest j wins a tie
          worst[k][i] = candidate;
          begin[k][i] = j;
        }
      }
  std::vector<int> boundaries(parts - 1);
  for (int k = parts, i = n; k > 1; --k) {
    i = begin[k][i];
    boundaries[k - 2] = i;
  }
  return boundaries;
}

namespace {

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

}  // namespace

std::vector<double> ChildCosts::seconds() const {
  std::vector<double> total;
  for (size_t i = 0; i < forward_seconds.size(); ++i) total.push_back(forward_seconds[i] + backward_seconds[i]);
  return total;
}

ChildCosts time_children(const nn::Sequential& model, const Tensor& sample, int repeats) {
  LOOM_CHECK(repeats >= 1, "time_children: repeats must be at least 1, got ", repeats);
  LOOM_CHECK(sample.defined(), "time_children: no sample batch");
  const auto copy = std::dynamic_pointer_cast<nn::SequentialImpl>(model->clone());
  const GeneratorState random_numbers = default_generator().state();  // what Dropout draws here is given back
  ChildCosts costs;
  Tensor x = sample;
  for (size_t i = 0; i < copy->size(); ++i) {
    const Tensor in = is_floating(x.dtype()) ? x.detach().requires_grad_() : x;
    std::vector<double> forward, backward, backward_input, backward_weight;
    Tensor out;
    for (int r = 0; r < repeats; ++r) {
      Stopwatch watch;
      out = (*copy)[i]->forward(in);
      synchronize(out.device());
      forward.push_back(watch.seconds());
      const Tensor grad = ones_like(out);
      double input_seconds = 0, weight_seconds = 0;
      if (out.requires_grad()) {
        watch.restart();
        autograd::WeightGradients weights = autograd::backward_inputs_first(
            {out}, {grad}, in.requires_grad() ? TensorList{in} : TensorList{});
        synchronize(out.device());
        input_seconds = watch.seconds();
        watch.restart();
        weights.compute();
        synchronize(out.device());
        weight_seconds = watch.seconds();
      }
      backward.push_back(input_seconds + weight_seconds);
      backward_input.push_back(input_seconds);
      backward_weight.push_back(weight_seconds);
    }
    costs.forward_seconds.push_back(median(forward));
    costs.backward_seconds.push_back(median(backward));
    costs.backward_input_seconds.push_back(median(backward_input));
    costs.backward_weight_seconds.push_back(median(backward_weight));
    costs.output_bytes.push_back(static_cast<int64_t>(out.nbytes()));
    x = out.detach();
  }
  default_generator().set_state(random_numbers);
  return costs;
}

std::vector<PassTimes> part_pass_times(const ChildCosts& costs, const std::vector<int>& boundaries) {
  const int n = static_cast<int>(costs.forward_seconds.size());
  std::vector<PassTimes> parts;
  int start = 0;
  for (size_t b = 0; b <= boundaries.size(); ++b) {
    const int end = b < boundaries.size() ? boundaries[b] : n;
    LOOM_CHECK(end > start && end <= n, "part_pass_times: boundaries must increase strictly within (0, ", n, ")");
    PassTimes part{0, 0, 0};
    for (int c = start; c < end; ++c) {
      part.forward += costs.forward_seconds[c];
      part.backward_input += costs.backward_input_seconds[c];
      part.backward_weight += costs.backward_weight_seconds[c];
    }
    parts.push_back(part);
    start = end;
  }
  return parts;
}

std::vector<int> balance_by_time(const nn::Sequential& model, const Tensor& sample, int parts, int repeats) {
  LOOM_CHECK(parts >= 1 && parts <= static_cast<int>(model->size()), "balance_by_time: cannot cut ", model->size(),
             " layers into ", parts, " stages of at least one layer each");
  return balanced_boundaries(time_children(model, sample, repeats).seconds(), parts);
}

}  // namespace loom::parallel
