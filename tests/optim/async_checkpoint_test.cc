// AsyncCheckpoint: the file holds the state at the snapshot, byte for byte
// what a synchronous save then writes, whatever training does meanwhile;
// saves never overlap; a failed write is rethrown once, never lost.
#include "optim/async_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <vector>

#include "nn/nn.h"
#include "tensor/file_io.h"
#include "tests/test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

const optim::CheckpointWriter kMe{.program = "trainer", .layout = "one device"};

class AsyncCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("async_ckpt_" + std::to_string(getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    manual_seed(1);
    model_ = nn::Linear(3, 2);
    opt_ = std::make_unique<optim::AdamW>(model_->parameters());
    train_step();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string bytes(const std::string& name) const { return read_file(path(name), "checkpoint", 1 << 20); }
  void train_step() {
    opt_->zero_grad();
    model_->forward(randn({4, 3})).sum().backward();  // draws: the random state moves too
    opt_->step();
  }

  nn::Linear model_{nullptr};
  std::unique_ptr<optim::AdamW> opt_;
  fs::path dir_;
};

TEST_F(AsyncCheckpointTest, TheFileIsTheStateAtTheSnapshot) {
  const optim::TrainingProgress progress{.epoch = 1, .step = 1, .extra = {{"note", "x"}}};
  optim::save_training_checkpoint(path("sync.safetensors"), *model_, *opt_, progress, kMe);
  optim::AsyncCheckpoint saver;
  saver.save(path("async.safetensors"), *model_, *opt_, progress, kMe);
  train_step();  // changes the weights, the optimizer's moments and the random state in place at once
  train_step();
  saver.wait();
  EXPECT_FALSE(saver.in_flight());
  EXPECT_EQ(bytes("async.safetensors"), bytes("sync.safetensors"));
}

TEST_F(AsyncCheckpointTest, ASaveWaitsForTheOneInFlight) {
  optim::AsyncCheckpoint saver;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex mutex;
  std::vector<std::string> order;
  auto log = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    order.push_back(what);
  };
  // The first write stays in flight until released: its `then` runs after its commit.
  saver.save(path("a.safetensors"), *model_, *opt_, {.step = 1}, kMe, [&] {
    released.wait();
    log("first write done");
  });
  EXPECT_TRUE(saver.in_flight());
  std::thread second([&] {
    saver.save(path("b.safetensors"), *model_, *opt_, {.step = 2}, kMe);
    log("second save returned");
  });
  log("released");
  release.set_value();
  second.join();
  saver.wait();
  EXPECT_EQ(order, (std::vector<std::string>{"released", "first write done", "second save returned"}));
  EXPECT_TRUE(fs::exists(path("a.safetensors")));
  EXPECT_TRUE(fs::exists(path("b.safetensors")));
}

TEST_F(AsyncCheckpointTest, AFailedWriteIsRethrownOnce) {
  optim::AsyncCheckpoint saver;
  const std::string missing = path("no/such/folder/run.safetensors");
  saver.save(missing, *model_, *opt_, {}, kMe);
  EXPECT_THROW_MSG(saver.wait(), missing);
  EXPECT_NO_THROW(saver.wait());  // once
  // Through check(), once the write has finished.
  saver.save(missing, *model_, *opt_, {}, kMe);
  while (saver.in_flight()) std::this_thread::yield();
  EXPECT_THROW_MSG(saver.check(), missing);
  EXPECT_NO_THROW(saver.check());
  // And through the next save, which waits for the last one first.
  saver.save(missing, *model_, *opt_, {}, kMe);
  EXPECT_THROW_MSG(saver.save(path("ok.safetensors"), *model_, *opt_, {}, kMe), missing);
  EXPECT_FALSE(fs::exists(path("ok.safetensors")));  // the failed save started nothing
}

TEST_F(AsyncCheckpointTest, TheDestructorWaitsForTheWrite) {
  {
    optim::AsyncCheckpoint saver;
    saver.save(path("run.safetensors"), *model_, *opt_, {.epoch = 3}, kMe);
  }
  const optim::TrainingCheckpoint c = optim::read_training_checkpoint(path("run.safetensors"), kMe);
  EXPECT_EQ(c.progress.epoch, 3);
}

TEST_F(AsyncCheckpointTest, TheTestDelayIsReadStrictly) {
  ::setenv("LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS", "-5", 1);
  optim::AsyncCheckpoint saver;
  EXPECT_THROW_MSG(saver.save(path("run.safetensors"), *model_, *opt_, {}, kMe),
                   "LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS is '-5'; expected milliseconds from 0 to 600000 (test-only)");
  ::setenv("LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS", "1", 1);
  saver.save(path("run.safetensors"), *model_, *opt_, {}, kMe);
  saver.wait();
  ::unsetenv("LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS");
  EXPECT_TRUE(fs::exists(path("run.safetensors")));
}

}  // namespace
}  // namespace loom
