// FlightRecorder: the last operations of every process group in this
// process, kept so that a hung job can say which rank never entered the
// collective the others wait in (PyTorch's NCCL flight recorder; the request
// in NVIDIA/nccl#1260).
//
//   LOOM_FLIGHT_RECORDER_ENTRIES=4096 mpirun -np 8 ./train   // default 2048; 0: off
//   parallel::dump_flight_record_on_signal();   // in main(); then `kill -USR2 <mpirun's pid>`:
//                                               // mpirun forwards it, every rank writes its record
//   python3 tools/flight_record.py .            // merges the ranks' records, names the missing rank
//
// ProcessGroup records each operation when it is issued, when its backend
// starts it on the communication thread, and when it finishes
// (process_group.cc), into one ring of the last N operations of the process,
// allocated once: the oldest entry is overwritten, and a step records no
// more than a few lock-protected stores per operation.
//
// A record is written, atomically, to <dir>/flight_rank<r>.json: dir is
// LOOM_FLIGHT_RECORDER_DIR, else the working directory (which mpirun gives
// every rank, so a job's records land together); r is this process's rank in
// the job (the launcher's, 0 without one). It is written when a group fails
// (an operation timed out: by the failing thread, before the error reaches
// the caller), on the signal dump_flight_record_on_signal() installed (by a
// watcher thread: the handler only wakes it), and on request (dump()).
#pragma once

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/op.h"

namespace loom::parallel {

enum class FlightState : uint8_t {
  Queued,     // issued, not started by the communication thread
  Started,    // started: waiting for the peers, or moving data
  Completed,
  Failed,
};
const char* flight_state_name(FlightState state);  // "queued", ...

// A process group as records name it.
struct FlightGroup {
  std::string name;     // the same on every member (ProcessGroup::name())
  std::string backend;  // "mpi", "threads", ...
  int size = 1;
  int rank = 0;         // the recording rank's rank in the group
  int job_rank = 0;     // ... and in the group split() began from
  std::string failure;  // why the group became unusable; empty while it is fine
};

// One operation.
struct FlightEntry {
  using Clock = std::chrono::steady_clock;

  uint64_t id = 0;  // 1, 2, ...: the order of recording in this process
  int group = -1;   // index into groups()
  OpKind kind = OpKind::Barrier;
  int64_t seq = 0;  // Op::seq: a collective's is the same on every rank of its group
  DType dtype = kFloat32;
  int64_t input_numel = 0, output_numel = 0;
  ReduceOp reduce = ReduceOp::Sum;
  int peer = -1;  // broadcast: root; send: dst; recv: src
  int tag = 0;
  FlightState state = FlightState::Queued;
  Clock::time_point issued_at, started_at, finished_at;  // default-constructed: not yet
  std::string error;  // failed: why
};

class FlightRecorder {
 public:
  // The process's recorder, sized by LOOM_FLIGHT_RECORDER_ENTRIES on first
  // use (throws loom::Error on a malformed value). Never destroyed, so that
  // communication threads may record until the process ends.
  static FlightRecorder& get();
  explicit FlightRecorder(size_t capacity);  // 0: records nothing
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  size_t capacity() const { return slots_.size(); }
  bool enabled() const { return !slots_.empty(); }

  // A group's index, for issued().
  int add_group(FlightGroup group);
  // New facts about group `index` (split() named it); its failure is kept.
  void rename_group(int index, FlightGroup group);
  // The operation's entry id (Op::flight_id), 0 when the recorder is off.
  uint64_t issued(int group, const Op& op);
  // An entry already overwritten by newer ones is left alone.
  void started(uint64_t id);
  void completed(uint64_t id);
  void failed(uint64_t id, const std::string& why);
  void group_failed(int group, const std::string& why);

  std::vector<FlightGroup> groups() const;
  // The entries still in the ring, oldest first.
  std::vector<FlightEntry> entries() const;
  // Operations recorded since the start (entries() holds the last capacity()).
  uint64_t recorded() const;

  // The record as JSON (tools/flight_record.py reads it); `reason` says what
  // asked for it, after "written on": "signal SIGUSR2", "the failure of group world".
  std::string to_json(const std::string& reason) const;
  // Writes the record to `path` atomically (tensor/file_io.h) and returns
  // the path; the default path is flight_record_path(). Throws loom::Error
  // naming the file when it cannot.
  std::string dump(const std::string& reason, const std::string& path = "") const;

 private:
  // With mutex_ held: an entry's slot, or null once overwritten; the ring's entries, oldest first.
  FlightEntry* entry(uint64_t id);
  std::vector<FlightEntry> entries_locked() const;

  mutable std::mutex mutex_;  // guards everything below
  std::vector<FlightEntry> slots_;
  uint64_t recorded_ = 0;
  std::vector<FlightGroup> groups_;
  mutable std::mutex dump_mutex_;  // one write at a time
};

// LOOM_FLIGHT_RECORDER_ENTRIES's value: a whole number from 0 (off) to
// 1,000,000; null or empty gives the default, 2048. Throws loom::Error on
// anything else, naming the variable and the range.
size_t flight_recorder_entries(const char* text);

// Where dump() writes: <LOOM_FLIGHT_RECORDER_DIR, else the working
// directory>/flight_rank<r>.json.
std::string flight_record_path();

// On `signum` (SIGUSR2 unless told; mpirun forwards it to every rank), a
// watcher thread writes this process's record and says where on stderr. The
// handler only writes a byte to a pipe. Replaces the signal's handler, if
// any; calling it again for the same signal does nothing more. Without this
// call SIGUSR2 ends the process, as by default.
void dump_flight_record_on_signal(int signum = SIGUSR2);

}  // namespace loom::parallel
