// Seedable random number generator shared by the CPU and CUDA backends.
//
// A Generator is a (seed, offset) pair over Philox (philox.h): each random op
// reserves one offset and draws element i from (seed, offset, i). The same
// seed gives the same numbers on every device and any number of threads.
//
//   manual_seed(42);                    // the default generator
//   Tensor a = randn({2, 3});
//   Generator g(7);
//   Tensor b = rand({4}, {}, &g);       // an explicit generator
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace loom {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// One random op's numbers: element i comes from (seed, offset, i).
//
// Inside a device graph (tensor/device_graph.h) the numbers must change from
// replay to replay although the kernels' arguments are fixed at capture. So a
// draw made while capturing is relative: `device_state` points to two words
// in device memory, the generator's seed and an offset origin, which the
// graph writes before each replay; the kernel then draws from
// (device_state[0], device_state[1] + offset, i), and `seed` is unused.
struct Draw {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const uint64_t* device_state = nullptr;
};

class Generator;

// What takes the device draws of a thread that is capturing a device graph
// (the graph itself): it returns a relative Draw, as above, and counts how
// many offsets each generator must advance by at every replay.
class DrawSink {
 public:
  virtual ~DrawSink() = default;
  virtual Draw take(Generator& generator) = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  // What a random op on a device draws from, the one way to take numbers
  // from a generator: the next offset; or, on a thread that is replaying
  // (DrawReplay), the next recorded draw; or, on a thread that is capturing
  // a device graph (DrawCapture), a draw relative to the graph's replays.
  // Thread-safe.
  Draw draw();
  // The first of `count` consecutive offsets, taken at once (a graph's
  // replay takes all the offsets its captured draws need).
  uint64_t reserve(uint64_t count) { return offset_.fetch_add(count); }

  GeneratorState state() const { return {seed_, offset_.load()}; }
  void set_state(const GeneratorState& state) {
    seed_ = state.seed;
    offset_ = state.offset;
  }

  // One random 64-bit word, for host-side uses (shuffling, sampling). Host
  // draws run when they are called, so a capture does not take them.
  uint64_t next_u64();
  // A uniform double in [0, 1), for host-side uses.
  double next_double();

 private:
  Draw draw(bool on_device);

  uint64_t seed_;
  std::atomic<uint64_t> offset_{0};
};

// Activation checkpointing (autograd/checkpoint.h) runs a segment twice,
// in the forward and again in the backward, and the second run must draw
// the first run's numbers, although other threads (DataParallel replicas,
// each running its own segments) draw from the same generator meanwhile: so
// a generator's state cannot be set back for the replay. Instead, while a
// DrawRecording lives, the draws this thread makes are appended to its log;
// while a DrawReplay lives, this thread's draws are the log's, in order, and
// no generator advances. They nest (LIFO): a recording inside a replay
// keeps the replayed draws.
class DrawRecording {
 public:
  explicit DrawRecording(std::vector<Draw>& log);
  ~DrawRecording();
  DrawRecording(const DrawRecording&) = delete;
  DrawRecording& operator=(const DrawRecording&) = delete;
};

class DrawReplay {
 public:
  explicit DrawReplay(const std::vector<Draw>& log);
  ~DrawReplay();
  DrawReplay(const DrawReplay&) = delete;
  DrawReplay& operator=(const DrawReplay&) = delete;
};

// While it lives, this thread's device draws go to `sink` (a device graph
// being captured); host draws and replays of recorded draws are unaffected.
class DrawCapture {
 public:
  explicit DrawCapture(DrawSink& sink);
  ~DrawCapture();
  DrawCapture(const DrawCapture&) = delete;
  DrawCapture& operator=(const DrawCapture&) = delete;
};

// The default generator, used when an op is given none: the process's,
// shared by all threads on purpose (as torch.manual_seed's is), except on a
// thread that holds a ThreadDefaultGenerator. manual_seed seeds that one.
Generator& default_generator();
void manual_seed(uint64_t seed);

// While it lives, this thread's default generator is one of its own, seeded
// `seed` (a fresh process's is seeded 0); other threads keep theirs. A rank
// thread then draws as a process of its own would: tensor and context
// parallelism over rank threads need it for dropout, where every rank must
// draw the masks the others draw (each rank thread holding one, seeded alike).
//
//   ThreadDefaultGenerator own;       // at the top of a rank thread
//   manual_seed(1234);                // this thread's generator only
class ThreadDefaultGenerator {
 public:
  explicit ThreadDefaultGenerator(uint64_t seed = 0);
  ~ThreadDefaultGenerator();
  ThreadDefaultGenerator(const ThreadDefaultGenerator&) = delete;
  ThreadDefaultGenerator& operator=(const ThreadDefaultGenerator&) = delete;

 private:
  Generator generator_;
  Generator* previous_;
};

// Whether this thread's default generator is its own (a ThreadDefaultGenerator lives).
bool thread_has_own_default_generator();

}  // namespace loom
