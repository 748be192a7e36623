// The CUDA caching allocator's bookkeeping (BlockPool) on a fake device, so
// that it runs without a GPU: rounding and segment sizes, reuse on a stream
// and not across streams, splitting and merging, blocks that wait for other
// streams' work, emptying the cache on out-of-memory, and random
// allocations checked against an independent record of what is live.
#include "tensor/cuda/block_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tensor/error.h"
#include "tests/test_util.h"

namespace loom::cuda {
namespace {

constexpr size_t KiB = 1 << 10, MiB = 1 << 20;

const StreamKey kStreamA = reinterpret_cast<StreamKey>(0x1000);
const StreamKey kStreamB = reinterpret_cast<StreamKey>(0x2000);
const StreamKey kStreamC = reinterpret_cast<StreamKey>(0x3000);

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// A device with `capacity` bytes in a made-up address space (never
// dereferenced), whose stream marks pass when the test says so.
class FakeDevice final : public DeviceMemory {
 public:
  explicit FakeDevice(size_t capacity = size_t{1} << 40) : capacity_(capacity) {}

  void* allocate_segment(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (in_use_ + bytes > capacity_) return nullptr;
    const uintptr_t at = next_;
    next_ += bytes + 64 * KiB;  // a gap: an overrun would land in no segment
    in_use_ += bytes;
    segments_[at] = bytes;
    ++allocations;
    return reinterpret_cast<void*>(at);
  }
  void free_segment(void* ptr) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = segments_.find(address(ptr));
    if (it == segments_.end()) {
      ++bad_frees;
      return;
    }
    in_use_ -= it->second;
    segments_.erase(it);
  }
  Mark mark(StreamKey stream) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_marks) return nullptr;
    marks_.push_back(std::make_unique<FakeMark>(FakeMark{stream, false, false}));
    return marks_.back().get();
  }
  bool passed(Mark mark) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++queries;
    return as_mark(mark)->passed;
  }
  void wait(Mark mark) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    as_mark(mark)->passed = true;  // the host waits until the stream gets there
    ++waits;
  }
  void recycle(Mark mark) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (as_mark(mark)->recycled) ++bad_recycles;
    as_mark(mark)->recycled = true;
  }
  [[noreturn]] void out_of_memory(size_t requested, const MemoryStats& stats) override {
    LOOM_FAIL("fake device out of memory: ", requested, " bytes requested");
  }

  // The work queued on `stream` so far is done.
  void finish(StreamKey stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& mark : marks_)
      if (mark->stream == stream) mark->passed = true;
  }
  // The segment holding [ptr, ptr + size), or 0.
  uintptr_t segment_of(const void* ptr, size_t size) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = segments_.upper_bound(address(ptr));
    if (it == segments_.begin()) return 0;
    --it;
    return address(ptr) + size <= it->first + it->second ? it->first : 0;
  }
  size_t in_use() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }
  size_t segment_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return segments_.size();
  }
  std::vector<size_t> segment_sizes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<size_t> sizes;
    for (auto& [at, bytes] : segments_) sizes.push_back(bytes);
    return sizes;
  }

  bool fail_marks = false;
  int allocations = 0, waits = 0, queries = 0, bad_frees = 0, bad_recycles = 0;

 private:
  struct FakeMark {
    StreamKey stream;
    bool passed;
    bool recycled;
  };
  static FakeMark* as_mark(Mark mark) { return static_cast<FakeMark*>(mark); }

  const size_t capacity_;
  mutable std::mutex mutex_;
  uintptr_t next_ = uintptr_t{1} << 40;
  size_t in_use_ = 0;
  std::map<uintptr_t, size_t> segments_;
  std::vector<std::unique_ptr<FakeMark>> marks_;
};

TEST(BlockPool, RequestsRoundUpTo512BytesAndSegmentsGrowByClass) {
  EXPECT_EQ(BlockPool::block_size(0), 512u);
  EXPECT_EQ(BlockPool::block_size(1), 512u);
  EXPECT_EQ(BlockPool::block_size(512), 512u);
  EXPECT_EQ(BlockPool::block_size(513), 1024u);
  EXPECT_EQ(BlockPool::segment_size(512), 2 * MiB);
  EXPECT_EQ(BlockPool::segment_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(BlockPool::segment_size(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(BlockPool::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(BlockPool::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(BlockPool::segment_size(10 * MiB + 512), 12 * MiB);
}

TEST(BlockPool, SmallRequestsShareA2MiBSegment) {
  FakeDevice device;
  BlockPool pool(device);
  void* a = pool.allocate(1, kStreamA);
  void* b = pool.allocate(1000, kStreamA);
  EXPECT_EQ(address(b), address(a) + 512) << "the second block is the first's split-off tail";
  EXPECT_EQ(device.segment_sizes(), std::vector<size_t>{2 * MiB});
  const MemoryStats stats = pool.stats();
  EXPECT_EQ(stats.allocated_bytes, 512 + 1024);
  EXPECT_EQ(stats.reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(stats.system_allocations, 1);
}

TEST(BlockPool, AFreedBlockIsReusedOnItsStreamAndNotOnAnother) {
  FakeDevice device;
  BlockPool pool(device);
  const size_t size = 12 * MiB;  // a segment each, nothing split off
  void* a = pool.allocate(size, kStreamA);
  void* b = pool.allocate(size, kStreamB);
  EXPECT_EQ(device.allocations, 2) << "stream B gets a segment of its own";
  pool.deallocate(a);
  pool.deallocate(b);
  EXPECT_EQ(pool.stats().allocated_bytes, 0);
  EXPECT_EQ(pool.allocate(size, kStreamB), b);
  EXPECT_EQ(pool.allocate(size, kStreamA), a);
  EXPECT_EQ(device.allocations, 2) << "each stream got its own block back";
  pool.deallocate(a);
  pool.deallocate(b);
  // Only other streams' blocks are free: a new segment for each.
  void* c = pool.allocate(size, kStreamC);  // after A's and B's in the free list's order
  void* a_again = pool.allocate(size, kStreamA);
  void* b_again = pool.allocate(size, kStreamB);
  EXPECT_EQ(device.allocations, 3);
  EXPECT_EQ(a_again, a);
  EXPECT_EQ(b_again, b);
  pool.deallocate(b_again);
  void* a2 = pool.allocate(size, kStreamA);  // before B's in that order
  EXPECT_NE(a2, b);
  EXPECT_EQ(device.allocations, 4);
  for (void* p : {a_again, a2, c}) pool.deallocate(p);
}

TEST(BlockPool, TheSmallestFittingBlockIsTaken) {
  FakeDevice device;
  BlockPool pool(device);
  void* big = pool.allocate(64 * KiB, kStreamA);
  void* keep1 = pool.allocate(512, kStreamA);
  void* small = pool.allocate(8 * KiB, kStreamA);
  void* keep2 = pool.allocate(512, kStreamA);
  pool.deallocate(big);
  pool.deallocate(small);  // free: 64 KiB, 8 KiB, and the segment's tail
  EXPECT_EQ(pool.allocate(6 * KiB, kStreamA), small);
  EXPECT_EQ(pool.allocate(60 * KiB, kStreamA), big);
  pool.deallocate(keep1);
  pool.deallocate(keep2);
}

TEST(BlockPool, FreedNeighboursMergeBackIntoTheWholeSegment) {
  FakeDevice device;
  BlockPool pool(device);
  // Three 4 MiB blocks out of one 20 MiB segment.
  void* a = pool.allocate(4 * MiB, kStreamA);
  void* b = pool.allocate(4 * MiB, kStreamA);
  void* c = pool.allocate(4 * MiB, kStreamA);
  ASSERT_EQ(device.segment_count(), 1u);
  pool.deallocate(b);
  pool.deallocate(a);
  pool.deallocate(c);
  // Only the whole segment, merged again, holds 9.5 MiB at its start.
  EXPECT_EQ(pool.allocate(19 * MiB / 2, kStreamA), a);
  EXPECT_EQ(device.allocations, 1);
  pool.deallocate(a);
  pool.empty_cache();
  EXPECT_EQ(device.segment_count(), 0u) << "one free block spanning the segment: given back";
  EXPECT_EQ(pool.stats().reserved_bytes, 0);
  EXPECT_EQ(pool.stats().system_frees, 1);
}

TEST(BlockPool, LargeLeftoversUnder1MiBStayWithTheirBlock) {
  FakeDevice device;
  BlockPool pool(device);
  void* p = pool.allocate(23 * MiB / 2, kStreamA);  // 11.5 MiB: a 12 MiB segment
  EXPECT_EQ(device.segment_sizes(), std::vector<size_t>{12 * MiB});
  EXPECT_EQ(pool.stats().allocated_bytes, static_cast<int64_t>(12 * MiB)) << "the 0.5 MiB tail is not split off";
  void* q = pool.allocate(21 * MiB / 2, kStreamA);  // 10.5 MiB: 12 MiB, 1.5 MiB left over
  EXPECT_EQ(pool.stats().allocated_bytes, static_cast<int64_t>(12 * MiB + 21 * MiB / 2));
  pool.deallocate(p);
  pool.deallocate(q);
}

TEST(BlockPool, ABlockUsedOnAnotherStreamWaitsForThatStreamsWork) {
  FakeDevice device;
  BlockPool pool(device);
  void* p = pool.allocate(256 * KiB, kStreamA);
  EXPECT_TRUE(pool.record_use(p, kStreamB));
  EXPECT_TRUE(pool.record_use(p, kStreamB)) << "recorded twice, one mark";
  EXPECT_TRUE(pool.record_use(p, kStreamA)) << "its own stream needs no mark";
  pool.deallocate(p);
  void* q = pool.allocate(256 * KiB, kStreamA);
  EXPECT_NE(q, p) << "stream B may still be using p";
  device.finish(kStreamB);
  EXPECT_EQ(pool.allocate(256 * KiB, kStreamA), p) << "B's work is done: p is back";
  pool.deallocate(q);
  pool.deallocate(p);
  EXPECT_FALSE(pool.record_use(p, kStreamB)) << "a freed pointer";
  EXPECT_FALSE(pool.record_use(reinterpret_cast<void*>(0x10), kStreamB)) << "a pointer the pool never gave";
  EXPECT_EQ(device.bad_recycles, 0);
}

TEST(BlockPool, ABlockWhoseMarkFailedIsNeverReused) {
  FakeDevice device;
  BlockPool pool(device);
  void* p = pool.allocate(256 * KiB, kStreamA);
  pool.record_use(p, kStreamB);
  device.fail_marks = true;
  pool.deallocate(p);
  EXPECT_EQ(pool.stats().allocated_bytes, 0);
  device.finish(kStreamB);
  pool.empty_cache();
  EXPECT_EQ(device.segment_count(), 1u) << "nothing says when B is done with p: its segment stays";
  for (int i = 0; i < 7; ++i) EXPECT_NE(pool.allocate(256 * KiB, kStreamA), p);
}

TEST(BlockPool, EmptyCacheWaitsForOtherStreamsAndFreesOnlyWhollyFreeSegments) {
  FakeDevice device;
  BlockPool pool(device);
  void* live = pool.allocate(1 * MiB, kStreamA);      // keeps its segment
  void* used = pool.allocate(4 * MiB, kStreamA);      // a 20 MiB segment
  void* freed = pool.allocate(100 * KiB, kStreamB);   // a 2 MiB segment
  pool.record_use(used, kStreamC);
  pool.deallocate(used);
  pool.deallocate(freed);
  ASSERT_EQ(device.segment_count(), 3u);
  pool.empty_cache();
  EXPECT_EQ(device.waits, 1) << "it waited for stream C";
  EXPECT_EQ(device.segment_count(), 1u);
  EXPECT_NE(device.segment_of(live, 1 * MiB), 0u);
  EXPECT_EQ(pool.stats().reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(device.bad_frees, 0);
  pool.deallocate(live);
}

TEST(BlockPool, OutOfMemoryEmptiesTheCacheAndTriesOnceMore) {
  FakeDevice device(4 * MiB);
  BlockPool pool(device);
  void* a = pool.allocate(1 * MiB, kStreamA);
  void* b = pool.allocate(1 * MiB, kStreamB);
  pool.record_use(b, kStreamC);
  pool.deallocate(a);
  pool.deallocate(b);  // both segments cached, b's waiting for stream C
  ASSERT_EQ(device.in_use(), 4 * MiB);
  void* c = pool.allocate(512 * KiB, kStreamC);
  EXPECT_EQ(device.waits, 1) << "b's mark was waited for";
  EXPECT_EQ(device.segment_count(), 1u) << "both cached segments went back, one new";
  const MemoryStats stats = pool.stats();
  EXPECT_EQ(stats.system_allocations, 3);
  EXPECT_EQ(stats.system_frees, 2);
  EXPECT_EQ(stats.reserved_bytes, static_cast<int64_t>(2 * MiB));
  pool.deallocate(c);
}

TEST(BlockPool, OutOfMemoryAfterEmptyingTheCacheThrowsAndThePoolStillWorks) {
  FakeDevice device(4 * MiB);
  BlockPool pool(device);
  void* held = pool.allocate(1 * MiB, kStreamA);
  EXPECT_THROW_MSG(pool.allocate(3 * MiB, kStreamA), "3145728 bytes requested");
  EXPECT_EQ(pool.stats().allocated_bytes, static_cast<int64_t>(1 * MiB));
  pool.deallocate(held);
  void* again = pool.allocate(1 * MiB, kStreamA);
  EXPECT_EQ(again, held);
  pool.deallocate(again);
}

// The blocks a test has live: start -> (end, stream).
struct LiveBlock {
  uintptr_t end;
  StreamKey stream;
};
using LiveBlocks = std::map<uintptr_t, LiveBlock>;

bool overlaps_a_live_block(const LiveBlocks& live, uintptr_t begin, uintptr_t end) {
  auto next = live.lower_bound(begin);
  return (next != live.end() && next->first < end) || (next != live.begin() && std::prev(next)->second.end > begin);
}

// Random requests on three streams, against a record kept here: live blocks
// never overlap and lie in one segment; a segment serves one stream; a
// block other streams used is not handed out before their work is done;
// the statistics add up; and everything goes back in the end.
TEST(BlockPool, RandomAllocationsKeepEveryInvariant) {
  FakeDevice device;
  BlockPool pool(device);
  std::mt19937_64 rng(7);
  const StreamKey streams[] = {kStreamA, kStreamB, kStreamC};
  LiveBlocks live;
  std::map<uintptr_t, StreamKey> segment_stream;  // which stream a segment serves
  struct Fenced {
    uintptr_t begin, end;
    StreamKey by;
  };
  std::vector<Fenced> fenced;  // freed, other streams' work pending
  int64_t live_requested = 0;

  auto size_draw = [&] {
    const double log_size = std::uniform_real_distribution<double>(0, 25)(rng);  // 1 byte to 32 MiB
    return static_cast<size_t>(std::exp2(log_size));
  };
  for (int op = 0; op < 4000; ++op) {
    const int what = std::uniform_int_distribution<int>(0, 9)(rng);
    if (what < 5 || live.empty()) {
      const size_t nbytes = size_draw();
      const StreamKey stream = streams[rng() % 3];
      void* p = pool.allocate(nbytes, stream);
      const uintptr_t begin = address(p), end = begin + BlockPool::block_size(nbytes);
      ASSERT_EQ(begin % 512, 0u);
      const uintptr_t segment = device.segment_of(p, end - begin);
      ASSERT_NE(segment, 0u) << "block outside every segment";
      auto [it, fresh] = segment_stream.emplace(segment, stream);
      ASSERT_EQ(it->second, stream) << "a segment serves one stream";
      ASSERT_FALSE(overlaps_a_live_block(live, begin, end));
      for (const Fenced& f : fenced)
        ASSERT_TRUE(end <= f.begin || begin >= f.end) << "handed out before another stream's work was done";
      live[begin] = {end, stream};
      live_requested += static_cast<int64_t>(end - begin);
    } else if (what < 9) {
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      const uintptr_t begin = it->first;
      const LiveBlock block = it->second;
      const bool used_elsewhere = rng() % 4 == 0;
      const StreamKey other = streams[(std::find(streams, streams + 3, block.stream) - streams + 1) % 3];
      if (used_elsewhere) {
        ASSERT_TRUE(pool.record_use(reinterpret_cast<void*>(begin), other));
      }
      pool.deallocate(reinterpret_cast<void*>(begin));
      if (used_elsewhere) fenced.push_back({begin, block.end, other});
      live_requested -= static_cast<int64_t>(block.end - begin);
      live.erase(it);
    } else {
      const StreamKey stream = streams[rng() % 3];
      device.finish(stream);
      fenced.erase(std::remove_if(fenced.begin(), fenced.end(), [&](const Fenced& f) { return f.by == stream; }),
                   fenced.end());
      if (rng() % 8 == 0) {
        pool.empty_cache();
        fenced.clear();  // it waited for every mark
        for (auto it = segment_stream.begin(); it != segment_stream.end();)
          it = device.segment_of(reinterpret_cast<void*>(it->first), 1) == 0 ? segment_stream.erase(it) : std::next(it);
      }
    }
    const MemoryStats stats = pool.stats();
    ASSERT_GE(stats.allocated_bytes, live_requested) << "op " << op;
    ASSERT_EQ(stats.reserved_bytes, static_cast<int64_t>(device.in_use())) << "op " << op;
  }
  for (auto& [begin, block] : live) pool.deallocate(reinterpret_cast<void*>(begin));
  EXPECT_EQ(pool.stats().allocated_bytes, 0);
  pool.empty_cache();
  EXPECT_EQ(device.segment_count(), 0u) << "every segment merged whole and went back";
  const MemoryStats stats = pool.stats();
  EXPECT_EQ(stats.reserved_bytes, 0);
  EXPECT_EQ(stats.system_allocations, stats.system_frees);
  EXPECT_EQ(stats.system_allocations, device.allocations);
  EXPECT_EQ(device.bad_frees, 0);
  EXPECT_EQ(device.bad_recycles, 0);
}

// Threads allocating and freeing while another empties the cache: no two
// live blocks overlap, and the statistics end at zero.
TEST(BlockPool, ConcurrentUseHandsOutDisjointBlocks) {
  FakeDevice device;
  BlockPool pool(device);
  std::mutex record_mutex;
  LiveBlocks live;
  bool overlap = false;
  auto worker = [&](int seed, StreamKey stream) {
    std::mt19937 rng(seed);
    std::vector<std::pair<void*, size_t>> mine;
    for (int i = 0; i < 3000; ++i) {
      if (mine.empty() || rng() % 2 == 0) {
        const size_t nbytes = size_t{1} << (rng() % 24);
        void* p = pool.allocate(nbytes, stream);
        const uintptr_t begin = address(p), end = begin + BlockPool::block_size(nbytes);
        std::lock_guard<std::mutex> lock(record_mutex);
        if (overlaps_a_live_block(live, begin, end)) overlap = true;
        live[begin] = {end, stream};
        mine.emplace_back(p, nbytes);
      } else {
        const size_t k = rng() % mine.size();
        {
          std::lock_guard<std::mutex> lock(record_mutex);
          live.erase(address(mine[k].first));
        }
        pool.deallocate(mine[k].first);
        mine.erase(mine.begin() + static_cast<long>(k));
      }
    }
    for (auto& [p, nbytes] : mine) {
      {
        std::lock_guard<std::mutex> lock(record_mutex);
        live.erase(address(p));
      }
      pool.deallocate(p);
    }
  };
  std::thread t1(worker, 1, kStreamA), t2(worker, 2, kStreamB), t3(worker, 3, kStreamA);
  for (int i = 0; i < 200; ++i) pool.empty_cache();
  t1.join();
  t2.join();
  t3.join();
  EXPECT_FALSE(overlap);
  EXPECT_EQ(pool.stats().allocated_bytes, 0);
  pool.empty_cache();
  EXPECT_EQ(device.segment_count(), 0u);
}

// A CUDA graph's capture (tensor/cuda/graph.h) on stream C: its blocks are
// a pool of their own, and blocks from outside released during the capture
// stay out of use until the graph lets them go.
TEST(BlockPoolCapture, BlocksOfTheCaptureStreamAreReusedWithinItAndByNoOtherStream) {
  FakeDevice device;
  BlockPool pool(device);
  pool.begin_capture(kStreamC);
  void* a = pool.allocate(4 * KiB, kStreamC);
  pool.deallocate(a);
  void* b = pool.allocate(4 * KiB, kStreamC);
  EXPECT_EQ(b, a) << "within the capture, its own freed block is reused (the graph keeps the order)";
  pool.deallocate(b);
  EXPECT_TRUE(pool.end_capture().empty());
  void* c = pool.allocate(4 * KiB, kStreamA);
  EXPECT_NE(device.segment_of(c, 4 * KiB), device.segment_of(a, 4 * KiB))
      << "another stream must never take the graph's memory, which every replay writes";
}

TEST(BlockPoolCapture, AnOutsideBlockReleasedDuringTheCaptureIsKeptUntilTheGraphLetsGo) {
  FakeDevice device;
  BlockPool pool(device);
  void* outside = pool.allocate(64 * KiB, kStreamA);
  pool.begin_capture(kStreamC);
  pool.deallocate(outside);  // the captured work may still read it at every replay
  const std::vector<void*> kept = pool.end_capture();
  ASSERT_EQ(kept, std::vector<void*>{outside});
  EXPECT_EQ(pool.stats().allocated_bytes, static_cast<int64_t>(64 * KiB)) << "still counted as in use";
  EXPECT_NE(pool.allocate(64 * KiB, kStreamA), outside) << "a kept block must not be handed out";
  // The graph dies while its replays on A may still run: A's own order makes
  // reuse on A safe at once.
  pool.release_after_replays(kept, kStreamA);
  EXPECT_EQ(pool.allocate(64 * KiB, kStreamA), outside);
}

TEST(BlockPoolCapture, AKeptBlockReleasedAfterReplaysOnAnotherStreamWaitsForThem) {
  FakeDevice device;
  BlockPool pool(device);
  void* outside = pool.allocate(64 * KiB, kStreamA);
  pool.begin_capture(kStreamC);
  pool.deallocate(outside);
  const std::vector<void*> kept = pool.end_capture();
  pool.release_after_replays(kept, kStreamB);  // the replays went on B
  EXPECT_NE(pool.allocate(64 * KiB, kStreamA), outside) << "B's replays may still use it";
  device.finish(kStreamB);
  EXPECT_EQ(pool.allocate(64 * KiB, kStreamA), outside);
}

TEST(BlockPoolCapture, NoEventIsQueriedOrWaitedForAndNothingFreedWhileCapturing) {
  FakeDevice device;
  BlockPool pool(device);
  void* shared = pool.allocate(4 * KiB, kStreamA);
  ASSERT_TRUE(pool.record_use(shared, kStreamB));
  pool.deallocate(shared);  // pending on B's mark
  void* spare = pool.allocate(30 * MiB, kStreamA);
  pool.deallocate(spare);  // a wholly free segment empty_cache would free
  const int segments = static_cast<int>(device.segment_count());
  pool.begin_capture(kStreamC);
  const int queries = device.queries;
  pool.allocate(4 * KiB, kStreamC);
  pool.empty_cache();
  EXPECT_EQ(device.queries, queries) << "cudaEventQuery is illegal inside a capture";
  EXPECT_EQ(device.waits, 0);
  EXPECT_EQ(static_cast<int>(device.segment_count()), segments + 1) << "cudaFree waits for the device: not now";
  pool.end_capture();
}

TEST(BlockPoolCapture, OneCaptureAtATime) {
  FakeDevice device;
  BlockPool pool(device);
  pool.begin_capture(kStreamC);
  EXPECT_THROW(pool.begin_capture(kStreamB), Error);
  pool.end_capture();
  pool.begin_capture(kStreamB);  // the next one may begin
  pool.end_capture();
}

}  // namespace
}  // namespace loom::cuda
