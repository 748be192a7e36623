// DataLoader: the batches of a Dataset, in order or shuffled, assembled ahead
// of the training loop by worker threads (PyTorch's DataLoader).
//
//   DataLoader loader(FashionMnist::train(),
//                     {.batch_size = 256, .shuffle = true, .num_workers = 2});
//   for (int64_t epoch = 0; epoch < 5; ++epoch)
//     for (auto& [x, y] : loader.epoch(epoch)) {  // x: (256, 1, 28, 28) float32, y: (256) int64
//       ...
//     }
//
// Order. A sampler turns (dataset size, epoch) into a list of positions:
// options.sampler if given (e.g. a DistributedSampler), else RandomSampler(seed)
// with shuffle, else SequentialSampler. Batch k of the epoch holds positions
// [k * batch_size, (k + 1) * batch_size) of that list; drop_last drops a short
// last batch. So the batches of epoch e are a function of the dataset, the
// options and e alone, whatever num_workers is.
//
// Threads. With num_workers = 0 a batch is built on the consumer's thread when
// it is taken. With num_workers > 0, that many threads build batches ahead of
// the consumer, at most num_workers * prefetch_batches ahead, and hand them
// over in order (data/prefetcher.h). Leaving the loop early, or destroying the
// Epoch or the DataLoader, stops the workers and joins them; an Epoch keeps
// the dataset alive, so it may outlive its DataLoader.
//
// Errors. An exception thrown while building a batch reaches the consumer
// when it takes that batch; a loom::Error gains the batch's number and epoch
// in front of its message, other exceptions arrive unchanged.
//
// Device. On the CPU, each batch is moved to options.device as it is taken.
// On a GPU, the workers build batches in pinned host memory, and batch k + 1
// is copied to the device on a side stream while step k runs; a batch is
// handed over with the consumer's current stream ordered after its copy, so
// neither the loop nor the GPU waits for data (data/device_copy.h).
#pragma once

#include <cstdint>
#include <exception>
#include <iterator>
#include <memory>
#include <type_traits>
#include <vector>

#include "data/dataset.h"
#include "data/prefetcher.h"
#include "data/sampler.h"

namespace loom::data {

namespace device_copy {
struct InFlight;
}

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;      // without a sampler: RandomSampler(seed)
  uint64_t seed = 0;         // of the shuffle
  bool drop_last = false;    // drop a last batch shorter than batch_size
  int num_workers = 0;       // threads that build batches ahead; 0: build on take
  int prefetch_batches = 2;  // per worker: how many batches each may hold ready
  // Which positions to visit, in what order (e.g. a DistributedSampler);
  // excludes `shuffle`.
  SharedSampler sampler = {};
  Device device = Device::cpu();
};

// One pass over the data: iterate it once with a range-for. The batch that
// an iterator points to stays valid until the next increment.
class Epoch {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Batch& operator*() const { return epoch_->current_; }
    Batch* operator->() const { return &epoch_->current_; }
    iterator& operator++() {
      epoch_->advance();
      position_ = epoch_->position_;
      return *this;
    }
    bool operator==(const iterator& other) const { return position_ == other.position_; }
    bool operator!=(const iterator& other) const { return position_ != other.position_; }

   private:
    friend class Epoch;
    iterator(Epoch* epoch, int64_t position) : epoch_(epoch), position_(position) {}
    Epoch* epoch_;
    int64_t position_;
  };

  ~Epoch();
  Epoch(const Epoch&) = delete;  // iterators point at the Epoch: it stays put
  Epoch& operator=(const Epoch&) = delete;

  // Starts the workers and takes the first batch; only once per Epoch.
  iterator begin();
  iterator end() { return iterator(this, num_batches_); }
  int64_t size() const { return num_batches_; }  // batches in this epoch, skipped ones included
  int64_t first_batch() const { return first_batch_; }  // the first one iterated
  int64_t number() const { return epoch_; }

 private:
  friend class DataLoader;
  Epoch(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> order,
        const DataLoaderOptions& options, int64_t epoch, int64_t num_batches, int64_t first_batch);

  Batch build(int64_t k) const;  // runs on worker threads
  Batch host_batch(int64_t k);   // the next built batch, on the consumer's thread
  Batch take(int64_t k);         // runs on the consumer's thread
  void advance();

  std::shared_ptr<const Dataset> dataset_;
  const std::vector<int64_t> order_;
  const DataLoaderOptions options_;
  const int64_t epoch_;
  const int64_t num_batches_;
  const int64_t first_batch_;
  bool started_ = false;
  int64_t position_ = 0;  // the batch in current_
  Batch current_;
  std::shared_ptr<device_copy::InFlight> ahead_;  // a GPU's next batch, on its way
  std::exception_ptr ahead_error_;                // or what building it threw, for its own take()
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // last: stopped before the rest goes
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options = {});
  // Takes a copy of a dataset value, e.g. DataLoader(FashionMnist::train(), {...}).
  template <typename D, typename = std::enable_if_t<std::is_base_of_v<Dataset, std::decay_t<D>>>>
  DataLoader(D&& dataset, const DataLoaderOptions& options = {})
      : DataLoader(std::make_shared<const std::decay_t<D>>(std::forward<D>(dataset)), options) {}

  // Epoch `epoch`'s batches; the epoch number seeds the shuffle. With
  // max_batches >= 0, only the first max_batches of them (quick runs). From
  // batch `first_batch` on (a resumed epoch): the earlier ones are not built.
  Epoch epoch(int64_t epoch, int64_t max_batches = -1, int64_t first_batch = 0) const;
  int64_t num_batches() const;  // per epoch

  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return *sampler_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  SharedSampler sampler_;  // options.sampler, or the default
};

}  // namespace loom::data
