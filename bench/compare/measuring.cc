#include "bench/compare/measuring.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/stopwatch.h"

namespace loom::bench {

double bytes_in(const Tensor& t) { return static_cast<double>(t.nbytes()); }

std::shared_ptr<nn::SequentialImpl> as_sequential(const nn::ModulePtr& m) {
  return std::dynamic_pointer_cast<nn::SequentialImpl>(m);
}

std::vector<Device> devices_of(const CompareConfig& c) {
  return c.device_list.empty() ? std::vector<Device>(c.devices, c.device) : c.device_list;
}

std::set<Device> distinct_devices(const CompareConfig& c) {
  const std::vector<Device> all = devices_of(c);
  std::set<Device> out(all.begin(), all.end());
  out.insert(c.device);
  return out;
}

Timed time_steps(const std::function<void()>& step, const CompareConfig& c, const std::string& strategy) {
  const std::set<Device> used = distinct_devices(c);
  for (int i = 0; i < c.warmup; ++i) step();
  for (const Device& d : used) synchronize(d);
  for (const Device& d : used) reset_peak_memory_stats(d);
  trace::clear();
  trace::enable(true);
  const auto start = Clock::now();
  for (int i = 0; i < c.steps; ++i) step();
  for (const Device& d : used) synchronize(d);
  const double seconds = seconds_since(start);
  trace::enable(false);
  if (!c.trace_dir.empty()) trace::write_chrome_trace(c.trace_dir + "/" + strategy + ".json");
  int64_t peak = 0;  // the devices' peaks added: the memory the strategy needs in all
  for (const Device& d : used) peak += memory_stats(d).peak_allocated_bytes;
  return {seconds / c.steps, peak, trace::events()};
}

double covered_seconds(std::vector<std::pair<int64_t, int64_t>> spans) {
  std::sort(spans.begin(), spans.end());
  int64_t total = 0, reach = INT64_MIN;
  for (auto [begin, end] : spans) {
    begin = std::max(begin, reach);
    if (end > begin) total += end - begin;
    reach = std::max(reach, end);
  }
  return total * 1e-6;
}

bool split_on_gpu(Measurement& m, const std::vector<trace::Event>& events, const std::vector<int>& compute_lanes,
                  const std::string& comm_lane_prefix, int steps) {
  std::vector<std::pair<int64_t, int64_t>> all_compute, comm, comm_and_compute;
  double compute = 0;
  for (int lane : compute_lanes) {
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const trace::Event& e : events)
      if (e.lane == lane && e.category == "compute") spans.emplace_back(e.begin_us, e.end_us);
    compute += covered_seconds(spans) / compute_lanes.size();
    all_compute.insert(all_compute.end(), spans.begin(), spans.end());
  }
  if (all_compute.empty()) return false;
  const std::vector<std::string> names = trace::lane_names();
  for (const trace::Event& e : events)
    if (e.category == "communication" && names.at(e.lane).rfind(comm_lane_prefix, 0) == 0)
      comm.emplace_back(e.begin_us, e.end_us);
  comm_and_compute = all_compute;
  comm_and_compute.insert(comm_and_compute.end(), comm.begin(), comm.end());
  const double exposed = comm.empty() ? 0 : covered_seconds(comm_and_compute) - covered_seconds(all_compute);
  m.compute_s = std::min(compute / steps, m.step_s);
  m.comm_s = std::clamp(exposed / steps, 0.0, m.step_s - m.compute_s);
  m.idle_s = m.step_s - m.compute_s - m.comm_s;
  return true;
}

double span_seconds(const std::vector<trace::Event>& events, const std::string& category, int lane, int steps) {
  int64_t us = 0;
  for (const trace::Event& e : events)
    if (e.category == category && e.lane == lane) us += e.end_us - e.begin_us;
  return us * 1e-6 / steps;
}

void split_step(Measurement& m, double comm_s, double idle_s) {
  m.comm_s = std::min(comm_s, m.step_s);
  m.idle_s = std::clamp(idle_s, 0.0, m.step_s - m.comm_s);
  m.compute_s = m.step_s - m.comm_s - m.idle_s;
}

void traced_step(nn::Module& module, optim::Optimizer& opt, const Workload& w, const Tensor& x, const Tensor& y,
                 int lane) {
  const Device device = x.device();
  Tensor loss;
  {
    trace::Span span("forward", "compute", lane, device);
    loss = w.loss(module.forward(x), y);
  }
  opt.zero_grad();
  {
    trace::Span span("backward", "compute", lane, device);
    loss.backward();
  }
  trace::Span span("optimizer", "compute", lane, device);
  opt.step();
}

parallel::PipelineOptions pipeline_options(const std::string& strategy, const CompareConfig& c) {
  const parallel::ScheduleKind kind = parallel::schedule_kind(strategy);
  parallel::PipelineOptions options{.micro_batches = c.micro_batches, .schedule = kind, .chunks = parallel::chunks_of(strategy)};
  // zb-h2, zb-v: scheduled for their parts' measured pass times.
  const auto plan = c.chunk_plans.find(options.chunks);
  if (parallel::built_for_pass_times(kind) && plan != c.chunk_plans.end())
    options.part_times = plan->second.part_times;
  return options;
}

std::vector<Device> repeated(const CompareConfig& c) { return devices_of(c); }

std::string trace_name(const std::string& strategy, const CompareConfig& c) {
  return c.group ? strategy + "_rank" + std::to_string(c.group->rank()) : strategy;
}

std::vector<std::vector<double>> gather(parallel::ProcessGroup& group, const std::vector<double>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor all = empty({group.size() * n}, {.dtype = kFloat64});
  group.all_gather(all, from_vector(values))->wait();
  std::vector<std::vector<double>> out;
  for (int r = 0; r < group.size(); ++r) out.push_back(all.narrow(0, r * n, n).to_vector<double>());
  return out;
}

}  // namespace loom::bench
