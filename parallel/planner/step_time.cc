#include "parallel/planner/step_time.h"

#include <algorithm>
#include <numeric>

#include "tensor/error.h"

namespace loom::parallel {

double Profile::forward_s() const { return std::accumulate(stage_forward_s.begin(), stage_forward_s.end(), 0.0); }
double Profile::backward_s() const { return std::accumulate(stage_backward_s.begin(), stage_backward_s.end(), 0.0); }

double ring_all_reduce_seconds(double ranks, double bytes, const Link& link, double messages) {
  const double n = ranks;
  return n <= 1 ? 0 : 2 * (n - 1) * (messages * link.latency_s + bytes / (n * link.bandwidth_bytes_per_s));
}

double project_step_seconds(const std::string& strategy, const Profile& p, const ProjectionSettings& s) {
  const std::string suffix = "_ckpt";
  if (strategy.size() > suffix.size() && strategy.compare(strategy.size() - suffix.size(), suffix.size(), suffix) == 0) {
    // Checkpointing recomputes the forward in backward: one more forward, shared like the rest.
    const std::string base = strategy.substr(0, strategy.size() - suffix.size());
    const double share = base == "single" ? 1 : base == "hybrid" ? s.mesh_data * p.stage_forward_s.size() : s.devices;
    return project_step_seconds(base, p, s) + p.forward_s() / share;
  }
  const double n = s.devices, fb = p.forward_s() + p.backward_s();
  const Link& link = s.link;
  if (strategy == "single") return fb + p.optimizer_s;
  if (strategy == "dp")
    return fb / n + p.optimizer_s + 2 * (n - 1) * link.seconds(p.parameter_bytes) +
           2 * (n - 1) / n * (p.input_bytes + p.output_bytes) / link.bandwidth_bytes_per_s;
  auto ring = [&](double n, double bytes, double k) { return ring_all_reduce_seconds(n, bytes, link, k); };
  if (is_ddp(strategy)) {
    const double k = std::max(1, s.ddp_buckets);
    const double bytes = strategy == "ddp" ? p.parameter_bytes : p.parameter_bytes / 2;  // 16-bit buckets
    const double c = ring(n, bytes, k);
    return fb / n + p.optimizer_s + std::max(c / k, c - p.backward_s() / n);
  }
  if (strategy == "zero1") return fb / n + p.optimizer_s / n + ring(n, p.parameter_bytes, 1);
  if (strategy == "zero2") {
    const double half = ring(n, p.parameter_bytes, 1) / 2;
    return fb / n + p.optimizer_s / n + std::max(0.0, half - p.backward_s() / n) + half;
  }
  if (strategy == "fsdp") return std::max(fb / n, 1.5 * ring(n, p.parameter_bytes, 1)) + p.optimizer_s / n;
  // Tensor and context parallelism's collectives carry activations (four per
  // block per step), which the per-stage profile does not measure: not modelled.
  if (strategy == "tp" || strategy == "tp-sp" || strategy == "hybrid-tp" || strategy.rfind("cp", 0) == 0) return -1;
  if (strategy == "hybrid") {
    const double d = s.mesh_data, stages = static_cast<double>(p.stage_forward_s.size()), m = s.micro_batches;
    double slowest = 0, largest_boundary = 0;
    for (size_t k = 0; k < p.stage_forward_s.size(); ++k)
      slowest = std::max(slowest, (p.stage_forward_s[k] + p.stage_backward_s[k]) / d);
    for (double a : p.boundary_bytes) largest_boundary = std::max(largest_boundary, a / d);
    const double hop = 2 * link.seconds(largest_boundary / m);
    const double stage_reduce = ring(d, p.parameter_bytes / stages, 1);
    return (m + stages - 1) * (slowest / m + hop) + std::max(0.0, stage_reduce - slowest / (2 * m)) +
           p.optimizer_s / (d * stages);
  }
  double boundaries = 0, largest_boundary = 0;
  for (double a : p.boundary_bytes) {
    boundaries += 2 * link.seconds(a);
    largest_boundary = std::max(largest_boundary, a);
  }
  const double optimizer_per_stage = p.optimizer_s / n;
  if (strategy == "layer_split") return fb + optimizer_per_stage + boundaries;
  if (is_pipeline(strategy)) {
    const double m = s.micro_batches;
    size_t k = 0;  // the slowest stage
    for (size_t i = 1; i < p.stage_forward_s.size(); ++i)
      if (p.stage_forward_s[i] + p.stage_backward_s[i] > p.stage_forward_s[k] + p.stage_backward_s[k]) k = i;
    const double slowest = p.stage_forward_s[k] + p.stage_backward_s[k];
    const double hop = p.boundary_bytes.empty() ? 0 : 2 * link.seconds(largest_boundary / m);
    // ZB-H1: 1F1B's slots, but weight passes fill the waits, so each of the
    // N - 1 bubble slots costs a forward only. ZB-H2 the same: both idle
    // only while the first micro-batch comes down, in theory with equal
    // passes (ZB-H2 comes nearer that where W is shorter than F).
    if (strategy == "zb-h1" || strategy == "zb-h2") return slowest + (n - 1) * p.stage_forward_s[k] / m + (m + n - 1) * hop + optimizer_per_stage;
    // ZB-V: two half-stage chunks in a V; a stage waits only while the first
    // micro-batch comes down (a chunk forward a stage), and each chunk sends
    // and receives its own activations and gradients: twice 1F1B's hops.
    if (strategy == "zb-v")
      return slowest + (n - 1) * p.stage_forward_s[k] / (2 * m) + (2 * m + n - 1) * hop + optimizer_per_stage;
    // Interleaved: v chunks a stage, so v m passes of 1/v the work, each
    // with its own hop (v times the messages).
    const double v = chunks_of(strategy);
    return (v * m + n - 1) * (slowest / (v * m) + hop) + optimizer_per_stage;
  }
  LOOM_FAIL("project_step_seconds: unknown strategy '", strategy, "'");
}

}  // namespace loom::parallel
