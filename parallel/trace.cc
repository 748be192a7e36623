#include "parallel/trace.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tensor/error.h"
#include "tensor/file_io.h"

namespace loom::trace {
namespace {

// The tracer is process-wide on purpose: spans come from every thread.
struct State {
  std::atomic<bool> on{false};
  std::mutex mutex;
  std::vector<Event> events;
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
}

int lane(const std::string& name) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto [it, added] = s.lanes.emplace(name, static_cast<int>(s.lane_names.size()));
  if (added) s.lane_names.push_back(name);
  return it->second;
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
  std::lock_guard<std::mutex> lock(state().mutex);
  return state().events;
}

Span::Span(const char* name, const char* category, int lane) : name_(name), category_(category), lane_(lane) {
  if (enabled()) begin_us_ = now_us();
}

Span::~Span() {
  if (begin_us_ >= 0) record(name_, category_, lane_, begin_us_, now_us());
}

void write_chrome_trace(const std::string& path) {
  using json = nlohmann::json;
  json events = json::array();
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", s.pid}, {"args", {{"name", s.process_name}}}});
    for (size_t i = 0; i < s.lane_names.size(); ++i)
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", s.pid}, {"tid", i},
                        {"args", {{"name", s.lane_names[i]}}}});
    for (const Event& e : s.events)
      events.push_back({{"ph", "X"}, {"name", e.name}, {"cat", e.category}, {"pid", s.pid}, {"tid", e.lane},
                        {"ts", e.begin_us}, {"dur", e.end_us - e.begin_us}});
  }
  write_file_atomically(path, json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace loom::trace
