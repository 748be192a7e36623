#include "parallel/comm/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

#include "tensor/error.h"
#include "tensor/file_io.h"

namespace loom::parallel {

namespace {

// Entries are about 130 bytes: the default ring is about 270 KB, the
// largest about 130 MB (more is a typo, not a wish).
constexpr size_t kDefaultEntries = 2048;  // a few hundred steps of DDP's per-bucket all_reduces
constexpr size_t kMaxEntries = 1000000;

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// This process's rank in the job, as the launcher numbers it (the world
// group's rank under mpirun); 0 when started alone.
int process_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* value = env(name)) return std::atoi(value);
  return 0;
}

// What the launcher calls this job, so that the tool can refuse records of
// two different jobs left in one folder.
std::string job_id() {
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"})
    if (const char* value = env(name)) return value;
  return "";
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

const char* signal_name(int signum) {
  switch (signum) {
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
  }
  return "a signal";
}

// The signal handler's end of the self-pipe, and the watcher thread's.
std::atomic<int> g_signal_write_fd{-1};
int g_signal_read_fd = -1;

// Async-signal-safe: one write(), errno kept. A full pipe drops the byte: a
// dump is already due.
void on_signal(int signum) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signum);
  const int fd = g_signal_write_fd.load();
  if (fd >= 0) (void)!write(fd, &byte, 1);
  errno = saved;
}

// Writes the record each time a signal's byte arrives. Detached: it blocks
// in read() until the process ends.
void watch_signals() {
  for (;;) {
    unsigned char byte = 0;
    const ssize_t n = read(g_signal_read_fd, &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    const std::string reason = detail::concat("signal ", signal_name(byte));
    try {
      const std::string path = FlightRecorder::get().dump(reason);
      std::fprintf(stderr, "loom: flight record written to %s (%s)\n", path.c_str(), reason.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom: could not write the flight record on %s: %s\n", reason.c_str(), e.what());
    }
  }
}

// Steady-clock times as wall-clock microseconds since 1970, so that ranks'
// records line up; null for "not yet".
struct WallClock {
  std::chrono::steady_clock::time_point steady = std::chrono::steady_clock::now();
  std::chrono::system_clock::time_point system = std::chrono::system_clock::now();

  nlohmann::json us(std::chrono::steady_clock::time_point t) const {
    if (t == std::chrono::steady_clock::time_point()) return nullptr;
    const auto since_epoch = system.time_since_epoch() + (t - steady);
    return std::chrono::duration_cast<std::chrono::microseconds>(since_epoch).count();
  }
};

}  // namespace

const char* flight_state_name(FlightState state) {
  switch (state) {
    case FlightState::Queued: return "queued";
    case FlightState::Started: return "started";
    case FlightState::Completed: return "completed";
    case FlightState::Failed: return "failed";
  }
  return "unknown";
}

size_t flight_recorder_entries(const char* text) {
  if (text == nullptr || *text == '\0') return kDefaultEntries;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  // Digits only: strtoull would take "-1" as 2^64 - 1 and " 5" as 5.
  bool digits = true;
  for (const char* c = text; *c != '\0'; ++c) digits &= *c >= '0' && *c <= '9';
  LOOM_CHECK(digits && *end == '\0' && errno == 0 && value <= kMaxEntries,
             "LOOM_FLIGHT_RECORDER_ENTRIES: expected a whole number of operations from 0 (off) to ", kMaxEntries,
             ", got '", text, "'");
  return static_cast<size_t>(value);
}

FlightRecorder& FlightRecorder::get() {
  // Leaked on purpose: communication threads and the signal watcher may
  // record or dump while static objects are destroyed at exit.
  static FlightRecorder* recorder = new FlightRecorder(flight_recorder_entries(std::getenv("LOOM_FLIGHT_RECORDER_ENTRIES")));
  return *recorder;
}

FlightRecorder::FlightRecorder(size_t capacity) : slots_(capacity) {}

int FlightRecorder::add_group(FlightGroup group) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back(std::move(group));
  return static_cast<int>(groups_.size()) - 1;
}

void FlightRecorder::rename_group(int index, FlightGroup group) {
  std::lock_guard<std::mutex> lock(mutex_);
  LOOM_INTERNAL_ASSERT(index >= 0 && index < static_cast<int>(groups_.size()), "no flight record group ", index);
  group.failure = std::move(groups_[index].failure);
  groups_[index] = std::move(group);
}

FlightEntry* FlightRecorder::entry(uint64_t id) {
  if (id == 0 || slots_.empty()) return nullptr;
  FlightEntry& e = slots_[(id - 1) % slots_.size()];
  return e.id == id ? &e : nullptr;
}

uint64_t FlightRecorder::issued(int group, const Op& op) {
  if (slots_.empty()) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = ++recorded_;
  FlightEntry& e = slots_[(id - 1) % slots_.size()];
  e.id = id;
  e.group = group;
  e.kind = op.kind;
  e.seq = op.seq;
  e.dtype = op.dtype();
  e.input_numel = op.input_numel();
  e.output_numel = op.output_numel();
  e.reduce = op.reduce;
  e.peer = op.peer;
  e.tag = op.tag;
  e.state = FlightState::Queued;
  e.issued_at = op.issued_at;
  e.started_at = e.finished_at = {};
  e.error.clear();  // keeps its capacity: a reused slot allocates nothing
  return id;
}

void FlightRecorder::started(uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* e = entry(id); e != nullptr && e->state == FlightState::Queued) {
    e->state = FlightState::Started;
    e->started_at = FlightEntry::Clock::now();
  }
}

void FlightRecorder::completed(uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* e = entry(id)) {
    e->state = FlightState::Completed;
    e->finished_at = FlightEntry::Clock::now();
  }
}

void FlightRecorder::failed(uint64_t id, const std::string& why) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* e = entry(id)) {
    e->state = FlightState::Failed;
    e->finished_at = FlightEntry::Clock::now();
    e->error = why;
  }
}

void FlightRecorder::group_failed(int group, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (group >= 0 && group < static_cast<int>(groups_.size()) && groups_[group].failure.empty())
    groups_[group].failure = why;
}

std::vector<FlightGroup> FlightRecorder::groups() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return groups_;
}

std::vector<FlightEntry> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_locked();
}

std::vector<FlightEntry> FlightRecorder::entries_locked() const {
  std::vector<FlightEntry> out;
  const uint64_t n = slots_.size();
  for (uint64_t id = recorded_ > n ? recorded_ - n + 1 : 1; id <= recorded_; ++id) out.push_back(slots_[(id - 1) % n]);
  return out;
}

uint64_t FlightRecorder::recorded() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return recorded_;
}

std::string FlightRecorder::to_json(const std::string& reason) const {
  using json = nlohmann::json;
  // One snapshot: the groups and entries of the same moment.
  std::vector<FlightGroup> groups;
  std::vector<FlightEntry> entries;
  uint64_t recorded = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    groups = groups_;
    recorded = recorded_;
    entries = entries_locked();
  }
  const WallClock clock;

  json out_groups = json::array();
  for (const FlightGroup& g : groups)
    out_groups.push_back({{"name", g.name}, {"backend", g.backend}, {"size", g.size}, {"rank", g.rank},
                          {"job_rank", g.job_rank}, {"failure", g.failure}});
  json out_entries = json::array();
  for (const FlightEntry& e : entries) {
    json j = {{"id", e.id},
              {"group", e.group},
              {"op", op_kind_name(e.kind)},
              {"seq", e.seq},
              {"p2p", is_p2p(e.kind)},
              {"dtype", dtype_name(e.dtype)},
              {"input_numel", e.input_numel},
              {"output_numel", e.output_numel},
              {"state", flight_state_name(e.state)},
              {"issued_us", clock.us(e.issued_at)},
              {"started_us", clock.us(e.started_at)},
              {"finished_us", clock.us(e.finished_at)}};
    if (e.kind == OpKind::AllReduce || e.kind == OpKind::ReduceScatter) j["reduce"] = reduce_op_name(e.reduce);
    if (e.kind == OpKind::Broadcast) j["root"] = e.peer;
    if (is_p2p(e.kind)) {
      j["peer"] = e.peer;
      j["tag"] = e.tag;
    }
    if (!e.error.empty()) j["error"] = e.error;
    out_entries.push_back(std::move(j));
  }
  json record = {{"format", "loom flight record 1"},
                 {"rank", process_rank()},
                 {"host", host_name()},
                 {"pid", static_cast<int64_t>(getpid())},
                 {"job", job_id()},
                 {"reason", reason},
                 {"written_us", clock.us(clock.steady)},
                 {"capacity", slots_.size()},
                 {"recorded", recorded},
                 {"groups", std::move(out_groups)},
                 {"entries", std::move(out_entries)}};
  return record.dump(1);
}

std::string FlightRecorder::dump(const std::string& reason, const std::string& path) const {
  const std::string target = path.empty() ? flight_record_path() : path;
  const std::string text = to_json(reason);
  std::lock_guard<std::mutex> lock(dump_mutex_);
  write_file_atomically(target, text);
  return target;
}

std::string flight_record_path() {
  std::string folder;
  if (const char* dir = env("LOOM_FLIGHT_RECORDER_DIR")) {
    folder = dir;
  } else {
    // The working directory by name, so that the message saying where the
    // record went gives a path that works from any shell.
    char cwd[4096];
    folder = getcwd(cwd, sizeof(cwd)) ? cwd : ".";
  }
  if (folder.back() != '/') folder += '/';
  return detail::concat(folder, "flight_rank", process_rank(), ".json");
}

void dump_flight_record_on_signal(int signum) {
  static std::mutex mutex;
  static std::vector<int> installed;
  std::lock_guard<std::mutex> lock(mutex);
  FlightRecorder::get();  // a malformed LOOM_FLIGHT_RECORDER_ENTRIES fails here, not in the watcher
  for (int s : installed)
    if (s == signum) return;
  if (g_signal_read_fd < 0) {
    int fds[2];
    LOOM_CHECK(pipe2(fds, O_CLOEXEC) == 0, "dump_flight_record_on_signal: cannot make a pipe: ", std::strerror(errno));
    // The handler must never block: a full pipe drops the byte instead.
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    g_signal_read_fd = fds[0];
    g_signal_write_fd.store(fds[1]);
    std::thread(watch_signals).detach();
  }
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // the program's own blocking calls go on
  LOOM_CHECK(sigaction(signum, &action, nullptr) == 0, "dump_flight_record_on_signal: cannot handle signal ", signum,
             ": ", std::strerror(errno));
  installed.push_back(signum);
}

}  // namespace loom::parallel
