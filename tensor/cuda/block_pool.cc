#include "tensor/cuda/block_pool.h"

#include <algorithm>
#include <cstdint>

#include "tensor/error.h"

namespace loom::cuda {
namespace {

constexpr size_t kRound = 512;                  // block sizes and alignment
constexpr size_t kSmallRequest = 1 << 20;       // up to 1 MiB: the small pool
constexpr size_t kSmallSegment = 2 << 20;       // the small pool grows by 2 MiB
constexpr size_t kMidRequest = 10 << 20;        // below 10 MiB: shared 20 MiB segments
constexpr size_t kMidSegment = 20 << 20;
constexpr size_t kLargeRound = 2 << 20;         // larger: own segment, rounded to 2 MiB
constexpr size_t kMinLargeRemainder = 1 << 20;  // smaller leftovers of large blocks are not split off

}  // namespace

size_t BlockPool::block_size(size_t nbytes) {
  return std::max(kRound, (nbytes + kRound - 1) / kRound * kRound);
}

size_t BlockPool::segment_size(size_t block) {
  if (block <= kSmallRequest) return kSmallSegment;
  if (block < kMidRequest) return kMidSegment;
  return (block + kLargeRound - 1) / kLargeRound * kLargeRound;
}

bool BlockPool::BlockOrder::operator()(const Block* a, const Block* b) const {
  auto sa = reinterpret_cast<uintptr_t>(a->stream), sb = reinterpret_cast<uintptr_t>(b->stream);
  if (sa != sb) return sa < sb;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

BlockPool::~BlockPool() {
  std::set<Block*> blocks(stranded_.begin(), stranded_.end());
  for (FreeBlocks* pool : {&small_free_, &large_free_}) blocks.insert(pool->begin(), pool->end());
  for (auto& [ptr, block] : allocated_) blocks.insert(block);
  for (auto& [mark, block] : pending_) blocks.insert(block);
  for (Block* block : blocks) delete block;  // the device memory is left alone
}

void* BlockPool::allocate(size_t nbytes, StreamKey stream) {
  const size_t size = block_size(nbytes);
  std::unique_lock<std::mutex> lock(mutex_);
  if (capturing_ == nullptr) process_marks();  // querying an event is illegal in a capture
  const bool small = size <= kSmallRequest;
  Block* block = take_best_fit(small ? small_free_ : large_free_, stream, size);
  if (block == nullptr) block = new_segment(size, stream, small, nbytes, lock);
  split(block, size);
  block->allocated = true;
  allocated_[block->ptr] = block;
  stats_.allocated(block->size);
  return block->ptr;
}

void BlockPool::deallocate(void* ptr) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  if (it == allocated_.end()) return;
  Block* block = it->second;
  // The graph being captured may still use a block from outside its pool
  // (or one another stream used): it stays allocated until the graph dies.
  if (capturing_ != nullptr && (block->stream != capturing_ || !block->used_on.empty())) {
    kept_.push_back(ptr);
    return;
  }
  allocated_.erase(it);
  block->allocated = false;
  stats_.freed(block->size);
  // Other streams may still read or write the block: it is free only once
  // the work they have queued so far is done.
  for (StreamKey other : block->used_on) {
    ++block->pending_marks;
    Mark mark = memory_.mark(other);
    if (mark != nullptr)
      pending_.emplace_back(mark, block);
    else if (stranded_.empty() || stranded_.back() != block)
      stranded_.push_back(block);  // no way to tell when it is safe: out of use for good
  }
  block->used_on.clear();
  if (block->pending_marks == 0) free_block(block);
}

bool BlockPool::record_use(void* ptr, StreamKey stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  if (it == allocated_.end()) return false;
  Block* block = it->second;
  if (stream != block->stream &&
      std::find(block->used_on.begin(), block->used_on.end(), stream) == block->used_on.end())
    block->used_on.push_back(stream);
  return true;
}

void BlockPool::empty_cache() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (capturing_ != nullptr) return;  // it would wait, and cudaFree waits for the device
  release_cached(lock);
}

void BlockPool::begin_capture(StreamKey stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  LOOM_CHECK(capturing_ == nullptr, "a CUDA graph capture began while another is under way on the same device; "
             "capture one graph at a time");
  capturing_ = stream;
}

std::vector<void*> BlockPool::end_capture() {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = nullptr;
  std::vector<void*> kept;
  kept.swap(kept_);
  return kept;
}

void BlockPool::release_after_replays(const std::vector<void*>& kept, StreamKey replay_stream) {
  for (void* ptr : kept) {
    if (replay_stream != nullptr) record_use(ptr, replay_stream);
    deallocate(ptr);
  }
}

MemoryStats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void BlockPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reset_peak();
}

BlockPool::Block* BlockPool::take_best_fit(FreeBlocks& pool, StreamKey stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

// Called with `lock` held; may release it for a while (release_cached).
BlockPool::Block* BlockPool::new_segment(size_t size, StreamKey stream, bool small, size_t requested,
                                         std::unique_lock<std::mutex>& lock) {
  const size_t bytes = segment_size(size);
  void* ptr = memory_.allocate_segment(bytes);
  if (ptr == nullptr && capturing_ == nullptr) {  // give the cache back and try once more (not in a capture: it waits)
    release_cached(lock);
    ptr = memory_.allocate_segment(bytes);
  }
  if (ptr == nullptr) memory_.out_of_memory(requested, stats_);
  ++stats_.system_allocations;
  stats_.reserved_bytes += static_cast<int64_t>(bytes);
  auto* block = new Block();
  block->ptr = ptr;
  block->size = bytes;
  block->stream = stream;
  block->small = small;
  return block;
}

// Splits the tail off `block` (taken out of its pool) when it is big enough
// to serve another request.
void BlockPool::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  if (rest < (block->small ? kRound : kMinLargeRemainder)) return;
  auto* tail = new Block();
  tail->ptr = static_cast<char*>(block->ptr) + size;
  tail->size = rest;
  tail->stream = block->stream;
  tail->small = block->small;
  tail->prev = block;
  tail->next = block->next;
  if (block->next != nullptr) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  pool_of(tail).insert(tail);
}

// Returns a block to its pool, merged with free neighbours.
void BlockPool::free_block(Block* block) {
  FreeBlocks& pool = pool_of(block);
  if (block->prev != nullptr && block->prev->is_free()) {
    pool.erase(block->prev);
    block = absorb_next(block->prev);
  }
  if (block->next != nullptr && block->next->is_free()) {
    pool.erase(block->next);
    absorb_next(block);
  }
  pool.insert(block);
}

// Grows `block` over its next neighbour, which goes. Returns `block`.
BlockPool::Block* BlockPool::absorb_next(Block* block) {
  Block* next = block->next;
  block->size += next->size;
  block->next = next->next;
  if (next->next != nullptr) next->next->prev = block;
  delete next;
  return block;
}

// Frees the blocks whose other-stream work has finished.
void BlockPool::process_marks() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!memory_.passed(it->first)) {
      ++it;
      continue;
    }
    finish_mark(*it);
    it = pending_.erase(it);
  }
}

void BlockPool::finish_mark(const Pending& entry) {
  memory_.recycle(entry.first);
  Block* block = entry.second;
  if (--block->pending_marks == 0) free_block(block);
}

// Waits for pending blocks, then gives every wholly free segment back.
// Called with `lock` held; it waits (for the marks, and in free_segment:
// cudaFree waits for the whole device) with the lock released: a kernel that
// never ends by itself (an NCCL collective whose peer died) must not block
// every other thread's frees, among them the NCCL watchdog's, which would
// then never abort that kernel.
void BlockPool::release_cached(std::unique_lock<std::mutex>& lock) {
  std::deque<Pending> waiting;
  waiting.swap(pending_);  // their blocks stay out of the pools until finish_mark
  lock.unlock();
  for (const Pending& entry : waiting) memory_.wait(entry.first);
  lock.lock();
  for (const Pending& entry : waiting) finish_mark(entry);

  std::vector<Block*> segments;  // wholly free: no neighbours
  for (FreeBlocks* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev != nullptr || block->next != nullptr) {
        ++it;
        continue;
      }
      ++stats_.system_frees;
      stats_.reserved_bytes -= static_cast<int64_t>(block->size);
      it = pool->erase(it);
      segments.push_back(block);
    }
  }
  lock.unlock();
  for (Block* segment : segments) {
    memory_.free_segment(segment->ptr);
    delete segment;
  }
  lock.lock();
}

}  // namespace loom::cuda
