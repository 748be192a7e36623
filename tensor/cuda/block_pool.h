// The caching allocator's bookkeeping, apart from CUDA: segments of device
// memory cut into blocks, free lists by stream and size, blocks that wait
// for other streams' work, and the statistics.
//
// What it asks of the device goes through DeviceMemory (CUDA's in
// caching_allocator.cc; a fake in tests/tensor/block_pool_test.cc, which runs
// without a GPU). The policy:
// - Requests are rounded up to 512 bytes. Blocks up to 1 MiB come from 2 MiB
//   segments (the small pool), those below 10 MiB from shared 20 MiB
//   segments, larger ones get a segment of their own rounded to 2 MiB.
// - A request takes the smallest free block of its pool on its own stream
//   that fits, and the rest is split off when it can serve another request.
//   A freed block merges with free neighbours in its segment.
// - A block belongs to the stream it was allocated on: reused at once by
//   later work there (the stream's order makes that safe), never by another
//   stream. A block that other streams used (record_use) is free only when
//   the work they had queued at its release is done (a mark per stream).
// - When the device is out of memory, the cache is emptied (waiting for the
//   marks, then freeing every wholly free segment) and the segment asked for
//   once more.
// - While a CUDA graph is captured on a stream of its own (graph.h), that
//   stream's blocks are the graph's private pool: no other stream takes
//   them, and every replay reuses them in the captured order. The pool then
//   neither waits nor queries events (both are illegal in a capture), and a
//   block from outside the private pool that is released during the capture
//   is kept from reuse, since the graph's replays still use it: end_capture()
//   hands such blocks to the graph, which releases them when it dies.
//
//   BlockPool pool(memory);
//   void* p = pool.allocate(1000, stream);   // a 1024-byte block
//   pool.record_use(p, other_stream);
//   pool.deallocate(p);                     // reusable once other_stream's work is done
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/allocator.h"

namespace loom::cuda {

using StreamKey = const void*;  // a cudaStream_t
using Mark = void*;             // a cudaEvent_t

// What the pool asks of a device. Calls that wait (wait, free_segment) are
// made with the pool's lock released.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Null when the device is out of memory; throws loom::Error on any other failure.
  virtual void* allocate_segment(size_t bytes) = 0;
  virtual void free_segment(void* ptr) noexcept = 0;
  // A mark after the work queued so far on `stream`; null if none could be made.
  virtual Mark mark(StreamKey stream) noexcept = 0;
  // Whether the work before `mark` is done (a failed mark counts as done).
  virtual bool passed(Mark mark) noexcept = 0;
  virtual void wait(Mark mark) noexcept = 0;
  virtual void recycle(Mark mark) noexcept = 0;  // done with it
  // The error for a request the device cannot serve even with the cache emptied.
  [[noreturn]] virtual void out_of_memory(size_t requested, const MemoryStats& stats) = 0;
};

class BlockPool {
 public:
  explicit BlockPool(DeviceMemory& memory) : memory_(memory) {}
  ~BlockPool();  // forgets its segments without freeing them (CUDA may be gone)
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  static size_t block_size(size_t nbytes);    // what a request takes
  static size_t segment_size(size_t block);   // what a pool grows by for it

  // Never null: throws (DeviceMemory::out_of_memory) when the device is full.
  void* allocate(size_t nbytes, StreamKey stream);
  // Never throws; a pointer the pool did not hand out is ignored.
  void deallocate(void* ptr) noexcept;
  // Work queued on `stream` uses the block at ptr. False if ptr is not a block in use.
  bool record_use(void* ptr, StreamKey stream);
  // Waits for the blocks other streams still use, then frees every wholly free segment.
  void empty_cache();

  // A capture on `stream` begins (one at a time). Until end_capture, releases
  // of blocks that are not `stream`'s are kept; end_capture returns them,
  // still allocated, for release_after_replays.
  void begin_capture(StreamKey stream);
  std::vector<void*> end_capture();
  // Releases blocks kept for a graph, once the work now queued on
  // `replay_stream` (the graph's replays) is done.
  void release_after_replays(const std::vector<void*>& kept, StreamKey replay_stream);

  MemoryStats stats() const;
  void reset_peak();

 private:
  // A piece of a segment; neighbours in the segment are linked so that free
  // neighbours merge back.
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    StreamKey stream = nullptr;  // the stream it was allocated on
    bool small = false;          // which pool
    bool allocated = false;
    int pending_marks = 0;       // other streams' work still using it after its release
    Block* prev = nullptr;
    Block* next = nullptr;
    std::vector<StreamKey> used_on;  // record_use

    bool is_free() const { return !allocated && pending_marks == 0; }
  };
  // Free blocks by stream, then size: lower_bound finds the best fit on a stream.
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeBlocks = std::set<Block*, BlockOrder>;
  using Pending = std::pair<Mark, Block*>;

  FreeBlocks& pool_of(const Block* block) { return block->small ? small_free_ : large_free_; }
  Block* take_best_fit(FreeBlocks& pool, StreamKey stream, size_t size);
  Block* new_segment(size_t size, StreamKey stream, bool small, size_t requested,
                     std::unique_lock<std::mutex>& lock);
  void split(Block* block, size_t size);
  void free_block(Block* block);
  Block* absorb_next(Block* block);
  void process_marks();
  void finish_mark(const Pending& entry);
  void release_cached(std::unique_lock<std::mutex>& lock);

  DeviceMemory& memory_;
  mutable std::mutex mutex_;
  FreeBlocks small_free_, large_free_;
  std::unordered_map<void*, Block*> allocated_;
  std::deque<Pending> pending_;
  std::vector<Block*> stranded_;  // a mark failed: never free again
  MemoryStats stats_;
  StreamKey capturing_ = nullptr;  // the stream of the capture under way, if any
  std::vector<void*> kept_;        // released during it from outside its pool
};

}  // namespace loom::cuda
