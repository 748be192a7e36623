// The pre-flight memory check: before a run starts, what it will need
// against what this machine (or its container) has available, so that a
// batch or buffer that cannot fit is an error naming its flag instead of a
// kill by the kernel's out-of-memory killer with no message.
//
//   const AvailableMemory available = available_memory();     // or LOOM_MEMORY_LIMIT_BYTES
//   check_fits_in_memory({.flag = "--batch-size", .value = 60000,
//                         .bytes = [&](int64_t b) { return fixed + per_sample * b; },
//                         .what = "for a training step"}, available);
//   // --batch-size 60000 needs about 41.0 GiB for a training step; this machine has 22.0 GiB
//   // available: try --batch-size 5600 or less
//
// Available is the least of /proc/meminfo's MemAvailable and, in a container,
// what each enclosing cgroup's memory limit leaves (cgroup v2 memory.max, v1
// memory.limit_in_bytes, less the usage that is not reclaimable page cache).
// A run may plan to use kUsableShare of it: the rest covers what an estimate
// leaves out (the allocators' size classes and caches, libraries' buffers,
// the kernel's page cache). LOOM_MEMORY_LIMIT_BYTES, when set, replaces the
// machine's figure: tests use it to stand in for a small machine.
//
// What a step needs is measured, not modelled: measure_step_memory runs a
// step at two small batch sizes and reads the allocator's peak
// (memory_stats), and the line through the two points gives the bytes at
// any batch size. docs/examples.md has the numbers behind the margin.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tensor/device.h"

namespace loom {

// The share of the available memory a run may plan to use.
inline constexpr double kUsableShare = 0.9;

struct AvailableMemory {
  int64_t bytes = 0;
  std::string where;  // "this machine has 22.0 GiB available", "LOOM_MEMORY_LIMIT_BYTES allows 64.0 MiB", ...
};

// LOOM_MEMORY_LIMIT_BYTES if set (digits only; anything else is an error
// naming it), else the machine's and its cgroups' figures under `root` (a
// test's fake /proc and /sys).
AvailableMemory available_memory(const std::string& root = "/");

// Processes of this job on this machine, which share its memory
// (OMPI_COMM_WORLD_LOCAL_SIZE under Open MPI's mpirun; 1 otherwise).
int processes_on_this_machine();

// What a run needs as a function of one flag's value.
struct MemoryDemand {
  std::string flag{};                       // "--batch-size"
  int64_t value = 0;                        // the value given
  std::function<int64_t(int64_t)> bytes{};  // bytes needed at a value (rising with it), for one copy
  std::string what{};                       // "for a training step (activations, gradients, AdamW's state)"
  int copies = 1;                           // how many each need as much on this machine
  std::string copies_are = "processes on this machine";  // what those copies are: "rank threads"
  int64_t smallest = 1;                     // the least value the flag takes
  int64_t multiple_of = 1;                  // a suggested value is a multiple of this (a batch split over ranks)
  std::string otherwise{};                  // when even `smallest` does not fit: "a smaller --width"
  // How a value is written on the command line (default: decimal), and the
  // rounding of a suggested value (default: down to two significant digits).
  std::function<std::string(int64_t)> spell{};
  std::function<int64_t(int64_t)> round_down{};
};

// Throws loom::Error, naming the flag, the bytes needed, the bytes available
// and the largest value that fits, when demand.bytes(value) * copies is
// more than kUsableShare of `available`.
void check_fits_in_memory(const MemoryDemand& demand, const AvailableMemory& available);

// "41.0 GiB", "512.0 MiB", "100 bytes".
std::string format_bytes(int64_t bytes);

// The peak bytes a step allocates on `device` beyond what is allocated
// before it, as fixed + per_sample * n.
struct StepMemory {
  double fixed = 0, per_sample = 0;
  int64_t at(int64_t n) const;
};

// The two batch sizes a step's memory is measured at: up to `batch`, at
// most a few per core (so that each thread of a CPU kernel has its share at
// both and its scratch buffers do not read as per-sample memory), and half.
struct MeasuringBatches {
  int64_t small = 1, large = 1;
};
MeasuringBatches measuring_batches(int64_t batch);

// The line through a step's peaks at the two batch sizes; peak_at(n) gives
// the bytes at n samples.
StepMemory fit_step_memory(const MeasuringBatches& at, const std::function<double(int64_t n)>& peak_at);

// Runs step(n) at measuring_batches(batch) and fits the line through the
// larger of its peak allocation and what it took from the system. `step`
// must leave nothing allocated (gradients set back, and so on).
StepMemory measure_step_memory(Device device, int64_t batch, const std::function<void(int64_t n)>& step);

}  // namespace loom
