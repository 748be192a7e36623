// DataLoader: coverage, batching, determinism across worker counts, errors,
// and clean shutdown. No sleeps; one bounded wait (threads_settle_to).
#include "data/dataloader.h"

#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "data/distributed_sampler.h"
#include "data/tensor_dataset.h"
#include "tests/test_util.h"

namespace loom::data {
namespace {

using testing::values;

// n examples: input row i = random features, target i (so a batch's targets
// are its dataset positions).
TensorDataset numbered(int64_t n, int64_t features = 3) {
  Generator gen(1);
  return TensorDataset(randn({n, features}, {}, &gen), arange(n));
}

std::vector<int64_t> targets_of(DataLoader& loader, int64_t epoch) {
  std::vector<int64_t> out;
  for (Batch& b : loader.epoch(epoch))
    for (int64_t t : b.target.to_vector<int64_t>()) out.push_back(t);
  return out;
}

// Every batch's input and target values, in order, as one list.
std::vector<std::vector<double>> contents(DataLoader& loader, int64_t epoch) {
  std::vector<std::vector<double>> out;
  for (auto& [x, y] : loader.epoch(epoch)) {  // structured bindings, as in data/data.h's example
    out.push_back(values(x));
    out.push_back(values(y));
  }
  return out;
}

int live_threads() {  // tasks of this process (Linux)
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// The number of live threads once it has settled to `expected`, or what it
// still is after five seconds. A joined thread can linger in /proc/self/task
// for a moment: the kernel wakes pthread_join before it reaps the task. A
// worker that was never joined stays blocked and is still counted.
int threads_settle_to(int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int n = live_threads();
  while (n != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    n = live_threads();
  }
  return n;
}

TEST(DataLoader, SequentialBatchesAndShapes) {
  DataLoader loader(numbered(10), {.batch_size = 4});
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<Shape> shapes;
  for (Batch& b : loader.epoch(0)) {
    shapes.push_back(b.input.shape());
    EXPECT_EQ(b.target.shape(), Shape{b.input.size(0)});
    EXPECT_EQ(b.input.dtype(), kFloat32);
    EXPECT_EQ(b.target.dtype(), kInt64);
  }
  EXPECT_EQ(shapes, (std::vector<Shape>{{4, 3}, {4, 3}, {2, 3}}));
  EXPECT_EQ(targets_of(loader, 0), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(DataLoader, DropLast) {
  DataLoader loader(numbered(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(loader.num_batches(), 2);
  EXPECT_EQ(targets_of(loader, 0), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  DataLoader exact(numbered(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(exact.num_batches(), 2);
  DataLoader none(numbered(3), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(none.num_batches(), 0);
  int count = 0;
  for (Batch& b : none.epoch(0)) count += static_cast<int>(b.input.size(0));
  EXPECT_EQ(count, 0);
}

TEST(DataLoader, ShuffleVisitsEveryIndexOncePerEpoch) {
  DataLoader loader(numbered(103),
                    {.batch_size = 10, .shuffle = true, .seed = 4, .num_workers = 2});
  std::vector<int64_t> e0 = targets_of(loader, 0), e1 = targets_of(loader, 1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, RandomSampler(4).indices(103, 0));  // the sampler's order, batched
  for (auto* e : {&e0, &e1}) {
    std::multiset<int64_t> seen(e->begin(), e->end());
    EXPECT_EQ(seen.size(), 103u);
    for (int64_t i = 0; i < 103; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
  }
  EXPECT_EQ(targets_of(loader, 0), e0);  // and the same again for epoch 0
}

TEST(DataLoader, SameBatchesForAnyNumberOfWorkers) {
  TensorDataset ds = numbered(97, 5);
  for (bool shuffle : {false, true}) {
    for (bool drop_last : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "shuffle " << shuffle << ", drop_last " << drop_last);
      DataLoaderOptions options{
          .batch_size = 8, .shuffle = shuffle, .seed = 3, .drop_last = drop_last};
      DataLoader reference(ds, options);
      const auto expected = contents(reference, 2);
      EXPECT_EQ(expected.size(), 2u * reference.num_batches());
      for (int workers : {1, 4}) {
        for (int prefetch : {1, 3}) {
          options.num_workers = workers;
          options.prefetch_batches = prefetch;
          DataLoader loader(ds, options);
          EXPECT_EQ(contents(loader, 2), expected) << workers << " workers, prefetch " << prefetch;
        }
      }
    }
  }
}

TEST(DataLoader, WithADistributedSampler) {
  // Two ranks, 4 workers each: each gets its sampler's share, batched, and
  // together they cover the dataset (11 examples: one is padded in).
  std::vector<int64_t> all;
  for (int rank : {0, 1}) {
    DataLoader loader(
        numbered(11),
        {.batch_size = 4, .num_workers = 4, .sampler = DistributedSampler(rank, 2, true, 8)});
    EXPECT_EQ(loader.num_batches(), 2);  // 6 per rank: 4 + 2
    std::vector<int64_t> got = targets_of(loader, 5);
    EXPECT_EQ(got, DistributedSampler(rank, 2, true, 8).indices(11, 5));
    all.insert(all.end(), got.begin(), got.end());
  }
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), 11u);
  EXPECT_EQ(all.size(), 12u);
}

// Throws for example `bad` (a loom::Error), or a std::runtime_error for `alien`.
class Faulty : public Dataset {
 public:
  Faulty(int64_t bad, int64_t alien) : bad_(bad), alien_(alien) {}
  int64_t size() const override { return 40; }
  Example get(int64_t i) const override {
    LOOM_CHECK(i != bad_, "Faulty: example ", i, " is corrupt");
    if (i == alien_) throw std::runtime_error("not a loom error");
    return {full({2}, double(i)), scalar_tensor(double(i), {.dtype = kInt64})};
  }

 private:
  int64_t bad_, alien_;
};

// Also on a GPU, where batch k + 1 is built while batch k is handed over:
// its error still waits for its own turn.
TEST(DataLoader, AnErrorReachesTheConsumerAtItsBatch) {
  std::vector<Device> devices = {Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda(0));
  for (Device device : devices) {
    for (int workers : {0, 1, 4}) {
      SCOPED_TRACE(::testing::Message() << workers << " workers, " << device);
      DataLoader loader(Faulty(13, -1), {.batch_size = 4, .num_workers = workers, .device = device});
      std::vector<int64_t> seen;
      try {
        for (Batch& b : loader.epoch(7))
          for (int64_t t : b.target.to_vector<int64_t>()) seen.push_back(t);
        ADD_FAILURE() << "no exception";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(
                      "DataLoader: batch 3 of epoch 7: Faulty: example 13 is corrupt"),
                  std::string::npos)
            << e.what();
      }
      EXPECT_EQ(seen.size(), 12u);  // batches 0..2 arrived first, in order
      // Other exception types arrive unchanged.
      DataLoader alien(Faulty(-1, 0), {.batch_size = 4, .num_workers = workers, .device = device});
      EXPECT_THROW(for (Batch& b : alien.epoch(0))(void) b, std::runtime_error);
    }
  }
}

TEST(DataLoader, LeavingEarlyStopsTheWorkers) {
  TensorDataset ds = numbered(1000);
  {  // warm up: whatever thread pools the process keeps are started now
    DataLoader loader(ds, {.batch_size = 10, .num_workers = 4});
    for (Batch& b : loader.epoch(0)) (void)b;
  }
  const int before = live_threads();
  for (int workers : {1, 4}) {
    DataLoader loader(
        ds, {.batch_size = 10, .shuffle = true, .num_workers = workers, .prefetch_batches = 2});
    int taken = 0;
    for (Batch& b : loader.epoch(0)) {
      (void)b;
      if (++taken == 3) break;
    }
    EXPECT_EQ(taken, 3);
    EXPECT_EQ(threads_settle_to(before), before);  // the workers were joined when the loop ended
  }
}

TEST(DataLoader, DestroyedMidEpoch) {
  TensorDataset ds = numbered(500);
  const int before = live_threads();
  {
    DataLoader loader(ds, {.batch_size = 5, .num_workers = 3});
    Epoch epoch = loader.epoch(0);
    auto it = epoch.begin();
    ++it;
    EXPECT_EQ(it->target.to_vector<int64_t>(), (std::vector<int64_t>{5, 6, 7, 8, 9}));
  }  // the Epoch (workers mid-flight) and then the loader go here
  EXPECT_EQ(threads_settle_to(before), before);

  // An Epoch may outlive its DataLoader: it holds the dataset.
  std::optional<DataLoader> loader(std::in_place, numbered(30),
                                   DataLoaderOptions{.batch_size = 7, .num_workers = 2});
  Epoch epoch = loader->epoch(0);
  auto it = epoch.begin();
  loader.reset();
  std::vector<int64_t> got;
  for (; it != epoch.end(); ++it)
    for (int64_t t : it->target.to_vector<int64_t>()) got.push_back(t);
  EXPECT_EQ(got.size(), 30u);
  EXPECT_EQ(got.back(), 29);
}

TEST(DataLoader, AnEpochIsASinglePass) {
  DataLoader loader(numbered(10), {.batch_size = 5});
  Epoch epoch = loader.epoch(1);
  EXPECT_EQ(epoch.size(), 2);
  EXPECT_EQ(epoch.number(), 1);
  for (Batch& b : epoch) (void)b;
  EXPECT_THROW_MSG(epoch.begin(), "DataLoader: epoch 1 is being iterated a second time");
}

// A dataset whose get_batch returns the wrong number of rows.
class Miscounting : public Dataset {
 public:
  int64_t size() const override { return 10; }
  Example get(int64_t i) const override { return {zeros({1}), zeros({1})}; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    return {zeros({static_cast<int64_t>(indices.size()), 1}), zeros({1})};  // the target is short
  }
};

// A sampler that returns an index outside the dataset.
class OffTheEnd : public Sampler {
 public:
  std::vector<int64_t> indices(int64_t n, int64_t) const override { return {0, n}; }
  int64_t num_samples(int64_t) const override { return 2; }
};

TEST(DataLoader, BadOptionsAndMisbehavingParts) {
  TensorDataset ds = numbered(10);
  EXPECT_THROW_MSG(DataLoader(ds, {.batch_size = 0}),
                   "DataLoader: batch_size must be at least 1, got 0");
  EXPECT_THROW_MSG(DataLoader(ds, {.num_workers = -1}),
                   "DataLoader: num_workers must be non-negative, got -1");
  EXPECT_THROW_MSG(DataLoader(ds, {.prefetch_batches = 0}),
                   "DataLoader: prefetch_batches must be at least 1, got 0");
  EXPECT_THROW_MSG(
      DataLoader(ds, {.shuffle = true, .sampler = std::make_shared<SequentialSampler>()}),
      "DataLoader: shuffle and sampler exclude each other");
  EXPECT_THROW_MSG(DataLoader(std::shared_ptr<const Dataset>()), "DataLoader: the dataset is null");
  if (!cuda_available())
    EXPECT_THROW_MSG(DataLoader(ds, {.device = Device::cuda(0)}),
                     "DataLoader: device cuda:0 is not available");

  DataLoader off(ds, {.sampler = std::make_shared<OffTheEnd>()});
  EXPECT_THROW_MSG(off.epoch(0),
                   "DataLoader: the sampler returned index 10 for a dataset of 10 examples");
  DataLoader miscounting(Miscounting(), {.batch_size = 3, .num_workers = 2});
  EXPECT_THROW_MSG(for (Batch& b
                        : miscounting.epoch(0))(void) b,
                   "DataLoader: batch 0: the dataset's get_batch was given 3 indices but returned "
                   "a target of shape [1]");
}

TEST(DataLoader, AnEpochCanStopEarly) {
  DataLoader loader(numbered(10), {.batch_size = 3, .shuffle = true, .seed = 2, .num_workers = 2});
  std::vector<std::vector<double>> whole, first_two;
  for (Batch& b : loader.epoch(4)) whole.push_back(testing::values(b.target));
  for (Batch& b : loader.epoch(4, 2)) first_two.push_back(testing::values(b.target));
  ASSERT_EQ(whole.size(), 4u);
  EXPECT_EQ(first_two, std::vector<std::vector<double>>(whole.begin(), whole.begin() + 2));  // the same batches
  EXPECT_EQ(loader.epoch(4, 0).size(), 0);
  EXPECT_EQ(loader.epoch(4, 99).size(), 4);
}

// A run stopped after batch k - 1 continues the epoch from batch k: the
// batches the whole epoch has from there on, with or without workers, and
// up to a max_batches end.
TEST(DataLoader, AnEpochCanStartAtABatch) {
  for (int workers : {0, 2}) {
    SCOPED_TRACE(::testing::Message() << workers << " workers");
    DataLoader loader(numbered(10), {.batch_size = 3, .shuffle = true, .seed = 2, .num_workers = workers});
    std::vector<std::vector<double>> whole, from_two, middle;
    for (Batch& b : loader.epoch(4)) whole.push_back(testing::values(b.target));
    for (Batch& b : loader.epoch(4, -1, 2)) from_two.push_back(testing::values(b.target));
    for (Batch& b : loader.epoch(4, 3, 1)) middle.push_back(testing::values(b.target));
    ASSERT_EQ(whole.size(), 4u);
    EXPECT_EQ(from_two, std::vector<std::vector<double>>(whole.begin() + 2, whole.end()));
    EXPECT_EQ(middle, std::vector<std::vector<double>>(whole.begin() + 1, whole.begin() + 3));
    int none = 0;
    for (Batch& b : loader.epoch(4, -1, 4)) none += static_cast<int>(b.target.numel());  // past the last: empty
    EXPECT_EQ(none, 0);
    EXPECT_EQ(loader.epoch(4, -1, 2).first_batch(), 2);
    EXPECT_THROW_MSG(loader.epoch(4, 2, 3), "DataLoader: epoch 4 has 2 batches; it cannot start at batch 3");
    EXPECT_THROW_MSG(loader.epoch(4, -1, -1), "DataLoader: epoch 4 has 4 batches; it cannot start at batch -1");
  }
}

TEST(DataLoader, DeviceIsAppliedToEveryBatch) {
  // On the CPU, batches arrive on the CPU (moving to CUDA is tested where a GPU is).
  DataLoader loader(numbered(6), {.batch_size = 4, .num_workers = 1, .device = Device::cpu()});
  for (Batch& b : loader.epoch(0)) {
    EXPECT_EQ(b.input.device(), Device::cpu());
    EXPECT_EQ(b.target.device(), Device::cpu());
  }
}

// On a GPU every batch equals the CPU loader's (same order), whether the
// consumer reads it at once or runs queued work first, with workers or without,
// and also when an epoch is left early (the batch on its way is dropped).
TEST(DataLoader, GpuBatchesEqualTheCpusAndArriveAhead) {
  LOOM_REQUIRE_CUDA();
  for (int workers : {0, 2}) {
    DataLoader cpu(numbered(23), {.batch_size = 4, .shuffle = true, .seed = 5});
    DataLoader gpu(numbered(23), {.batch_size = 4, .shuffle = true, .seed = 5, .num_workers = workers,
                                  .device = Device::cuda(0)});
    for (int64_t epoch : {0, 1}) {
      std::vector<Batch> expected;
      for (Batch& b : cpu.epoch(epoch)) expected.push_back(b);
      size_t k = 0;
      for (Batch& b : gpu.epoch(epoch)) {
        ASSERT_LT(k, expected.size());
        EXPECT_EQ(b.input.device(), Device::cuda(0));
        // Work on the batch, queued before it is read back. The CPU does the
        // same two correctly rounded float32 ops: (x * 2 + 1 - 1) / 2 is not x
        // in float32 (the + 1 drops low bits of the randn inputs).
        Tensor busy = b.input * 2 + 1;
        EXPECT_EQ(testing::values(busy), testing::values(expected[k].input * 2 + 1));
        EXPECT_EQ(testing::values(b.target), testing::values(expected[k].target));
        ++k;
      }
      EXPECT_EQ(k, expected.size());
    }
    for (Batch& b : gpu.epoch(2)) {  // leave early: the next batch is already on its way
      EXPECT_EQ(b.input.device(), Device::cuda(0));
      break;
    }
  }
}

}  // namespace
}  // namespace loom::data
