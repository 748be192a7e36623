#include "data/dataloader.h"

#include <algorithm>
#include <utility>

#include "data/device_copy.h"
#include "tensor/error.h"

namespace loom::data {
namespace {

void check_batch(const Batch& b, size_t count, int64_t k) {
  for (const Tensor* t : {&b.input, &b.target})
    LOOM_CHECK(t->defined() && t->dim() >= 1 && t->size(0) == static_cast<int64_t>(count),
               "DataLoader: batch ", k, ": the dataset's get_batch was given ", count,
               " indices but returned ", t == &b.input ? "an input" : "a target", " of shape ",
               t->defined() ? t->shape() : Shape{}, t->defined() ? "" : " (undefined)",
               "; expected the batch as the first dimension");
}

}  // namespace

// ---- Epoch ----

Epoch::Epoch(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> order,
             const DataLoaderOptions& options, int64_t epoch, int64_t num_batches, int64_t first_batch)
    : dataset_(std::move(dataset)),
      order_(std::move(order)),
      options_(options),
      epoch_(epoch),
      num_batches_(num_batches),
      first_batch_(first_batch) {}

Epoch::~Epoch() {
  ahead_.reset();
  prefetcher_.reset();
}

Batch Epoch::build(int64_t k) const {
  const auto begin = static_cast<size_t>(k * options_.batch_size);
  const size_t end = std::min(order_.size(), begin + static_cast<size_t>(options_.batch_size));
  const std::vector<int64_t> indices(order_.begin() + begin, order_.begin() + end);
  Batch batch;
  try {
    batch = dataset_->get_batch(indices);
  } catch (const Error& e) {
    LOOM_FAIL("DataLoader: batch ", k, " of epoch ", epoch_, ": ", e.what());
  }
  check_batch(batch, indices.size(), k);
  // For a GPU: pinned here, on the worker, so that the copy runs asynchronously.
  return options_.device.is_cuda() ? device_copy::pin(std::move(batch)) : batch;
}

Batch Epoch::host_batch(int64_t k) { return prefetcher_ ? prefetcher_->next() : build(k); }

// On a GPU, batch k + 1 starts its copy (on a side stream) as batch k is
// handed over, so it travels while step k runs.
Batch Epoch::take(int64_t k) {
  if (!options_.device.is_cuda()) {
    Batch batch = host_batch(k);
    if (batch.input.device() != options_.device) batch.input = batch.input.to(options_.device);
    if (batch.target.device() != options_.device) batch.target = batch.target.to(options_.device);
    return batch;
  }
  if (ahead_error_) std::rethrow_exception(std::exchange(ahead_error_, nullptr));
  if (!ahead_) ahead_ = device_copy::start(host_batch(k), options_.device);
  std::shared_ptr<device_copy::InFlight> current = std::move(ahead_);
  ahead_.reset();
  // Batch k + 1's error belongs to its own take: batch k is still handed over.
  if (k + 1 < num_batches_) {
    try {
      ahead_ = device_copy::start(host_batch(k + 1), options_.device);
    } catch (...) {
      ahead_error_ = std::current_exception();
    }
  }
  return device_copy::finish(*current);
}

Epoch::iterator Epoch::begin() {
  LOOM_CHECK(!started_, "DataLoader: epoch ", epoch_, " is being iterated a second time; an Epoch ",
             "is a single pass: call loader.epoch(", epoch_, ") again for another");
  started_ = true;
  const int64_t first = first_batch_;
  if (options_.num_workers > 0 && num_batches_ > first)  // the prefetcher counts from 0: batch first + k
    prefetcher_ = std::make_unique<BatchPrefetcher>(
        [this, first](int64_t k) { return build(first + k); }, num_batches_ - first, options_.num_workers,
        options_.num_workers * options_.prefetch_batches);
  position_ = first;
  if (num_batches_ > first) current_ = take(first);
  return iterator(this, position_);
}

void Epoch::advance() {
  LOOM_CHECK(started_ && position_ < num_batches_, "DataLoader: increment past the end of epoch ",
             epoch_);
  ++position_;
  current_ = Batch{};  // let the last batch go before the next arrives
  if (position_ < num_batches_) current_ = take(position_);
}

// ---- DataLoader ----

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options) {
  LOOM_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  LOOM_CHECK(options.batch_size >= 1, "DataLoader: batch_size must be at least 1, got ",
             options.batch_size);
  LOOM_CHECK(options.num_workers >= 0, "DataLoader: num_workers must be non-negative, got ",
             options.num_workers);
  LOOM_CHECK(options.prefetch_batches >= 1, "DataLoader: prefetch_batches must be at least 1, got ",
             options.prefetch_batches);
  LOOM_CHECK(!(options.shuffle && options.sampler),
             "DataLoader: shuffle and sampler exclude each other (the sampler decides the order; ",
             "give it a shuffling sampler instead)");
  LOOM_CHECK(options.device.is_cpu() || cuda_available(), "DataLoader: device ", options.device,
             " is not available (no CUDA device, or loom built without CUDA)");
  if (options.sampler)
    sampler_ = options.sampler;
  else if (options.shuffle)
    sampler_ = RandomSampler(options.seed);
  else
    sampler_ = SequentialSampler();
}

int64_t DataLoader::num_batches() const {
  const int64_t samples = sampler_->num_samples(dataset_->size());
  return options_.drop_last ? samples / options_.batch_size
                            : (samples + options_.batch_size - 1) / options_.batch_size;
}

Epoch DataLoader::epoch(int64_t epoch, int64_t max_batches, int64_t first_batch) const {
  const int64_t n = dataset_->size();
  std::vector<int64_t> order = sampler_->indices(n, epoch);
  const int64_t expected = sampler_->num_samples(n);
  LOOM_CHECK(static_cast<int64_t>(order.size()) == expected, "DataLoader: the sampler returned ",
             order.size(), " indices for epoch ", epoch, " but its num_samples says ", expected);
  for (int64_t i : order)
    LOOM_CHECK(i >= 0 && i < n, "DataLoader: the sampler returned index ", i, " for a dataset of ",
               n, " examples");
  const int64_t batches = max_batches >= 0 ? std::min(max_batches, num_batches()) : num_batches();
  LOOM_CHECK(first_batch >= 0 && first_batch <= batches, "DataLoader: epoch ", epoch, " has ", batches,
             " batches; it cannot start at batch ", first_batch);
  return Epoch(dataset_, std::move(order), options_, epoch, batches, first_batch);
}

}  // namespace loom::data
