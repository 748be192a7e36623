#include "parallel/trace.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <map>
#include <unordered_map>

#include "tensor/error.h"
#include "tensor/file_io.h"

namespace loom::trace {
namespace {

// The tracer is process-wide on purpose: spans come from every thread.
// A span timed on a GPU, resolved into an Event by events().
struct GpuSpan {
  std::string name, category;
  int lane;
  Device device;
  DeviceMark begin, end;
};

// Where a device's GPU times are placed on the host clock: a timed mark
// made at a known host time (the GPU may run behind; durations are exact).
struct Anchor {
  DeviceMark mark;
  int64_t host_us = 0;
};

struct State {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<Event> events;
  std::vector<GpuSpan> gpu_spans;
  std::map<Device, Anchor> anchors;
  std::unordered_map<std::string, int> lanes;
  std::vector<std::string> lane_names;
  int pid = 0;
  std::string process_name = "loom";
};

State& state() {
  static State* s = new State();  // never destroyed: spans may end during static destruction
  return *s;
}

const auto kStart = std::chrono::steady_clock::now();

}  // namespace

void enable(bool on) { state().on.store(on, std::memory_order_relaxed); }
bool enabled() { return state().on.load(std::memory_order_relaxed); }

void clear() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().events.clear();
  state().gpu_spans.clear();
  state().anchors.clear();
}

int lane(const std::string& name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto [it, added] = s.lanes.emplace(name, static_cast<int>(s.lane_names.size()));
  if (added) s.lane_names.push_back(name);
  return it->second;
}

std::vector<std::string> lane_names() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().lane_names;
}

void set_process(int pid, const std::string& name) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().pid = pid;
  state().process_name = name;
}

int64_t now_us() { return to_us(std::chrono::steady_clock::now()); }

int64_t to_us(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t - kStart).count();
}

void record(const std::string& name, const std::string& category, int lane, int64_t begin_us, int64_t end_us) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(state().mutex);
  state().events.push_back({name, category, lane, begin_us, end_us});
}

std::vector<Event> events() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const GpuSpan& g : s.gpu_spans) {  // now the GPU's times are known (waits for them)
    const Anchor& anchor = s.anchors.at(g.device);
    const auto at = [&](const DeviceMark& m) {
      return anchor.host_us + static_cast<int64_t>(anchor.mark.seconds_until(m) * 1e6);
    };
    s.events.push_back({g.name, g.category, g.lane, at(g.begin), at(g.end)});
  }
  s.gpu_spans.clear();
  return s.events;
}

Span::Span(const char* name, const char* category, int lane, Device device)
    : name_(name), category_(category), lane_(lane), device_(device) {
  if (!enabled()) return;
  begin_us_ = now_us();
  if (device.is_cpu()) return;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.anchors.count(device)) s.anchors[device] = {DeviceMark::timed(device), begin_us_};
  }
  gpu_begin_ = DeviceMark::timed(device);
}

Span::~Span() {
  if (begin_us_ < 0) return;
  if (!gpu_begin_.on_device()) {
    record(name_, category_, lane_, begin_us_, now_us());
    return;
  }
  GpuSpan g{name_, category_, lane_, device_, gpu_begin_, DeviceMark::timed(device_)};
  std::lock_guard<std::mutex> lock(state().mutex);
  state().gpu_spans.push_back(std::move(g));
}

void write_chrome_trace(const std::string& path) {
  using json = nlohmann::json;
  json events = json::array();
  const std::vector<Event> recorded = trace::events();  // GPU spans resolved
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", s.pid}, {"args", {{"name", s.process_name}}}});
    for (size_t i = 0; i < s.lane_names.size(); ++i)
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", s.pid}, {"tid", i},
                        {"args", {{"name", s.lane_names[i]}}}});
    for (const Event& e : recorded)
      events.push_back({{"ph", "X"}, {"name", e.name}, {"cat", e.category}, {"pid", s.pid}, {"tid", e.lane},
                        {"ts", e.begin_us}, {"dur", e.end_us - e.begin_us}});
  }
  write_file_atomically(path, json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace loom::trace
