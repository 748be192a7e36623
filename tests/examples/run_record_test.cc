// RunRecord: the checkpoint is the one commit of an epoch. Whatever state the
// CSV is in (a kill between the two writes, an edit, damage), resume rebuilds
// it from the checkpoint; a checkpoint of another run is refused by name.
#include "examples/common/run_record.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tests/test_util.h"

namespace loom::examples {
namespace {

namespace fs = std::filesystem;

class RunRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("run_record_" + std::to_string(getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string contents(const std::string& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  RunRecord::Options options(const std::string& lr = "0.1") const {
    return {.checkpoint = path("run.safetensors"), .metrics = path("run.csv"), .columns = {"epoch", "loss"},
            .settings = {{"--lr", lr}, {"--epochs", "3"}}, .writer = {.program = "trainer", .layout = "one device"}};
  }
  // Two epochs committed, as a training run would.
  void train_two_epochs() {
    RunRecord record(options());
    record.check_writable();
    for (int64_t epoch = 1; epoch <= 2; ++epoch) {
      model_->forward(ones({1, 2})).sum().backward();
      opt_.step();
      record.commit_epoch(*model_, opt_, {.epoch = epoch, .step = 10 * epoch}, {static_cast<double>(epoch), 1.0 / epoch});
    }
  }

  fs::path dir_;
  nn::Linear model_{2, 1};
  optim::SGD opt_{model_->parameters(), {.lr = 0.1}};
};

TEST_F(RunRecordTest, CommitsTheCheckpointAndTheCsv) {
  train_two_epochs();
  EXPECT_EQ(contents(path("run.csv")), "epoch,loss\n1,1\n2,0.5\n");
  nn::Linear fresh(2, 1);
  optim::SGD fresh_opt(fresh->parameters(), {.lr = 0.1});
  RunRecord resumed(options());
  optim::TrainingProgress p = resumed.resume(*fresh, fresh_opt);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(p.step, 20);
  EXPECT_EQ(testing::values(fresh->weight), testing::values(model_->weight));
  resumed.commit_epoch(*fresh, fresh_opt, {.epoch = 3, .step = 30}, {3, 0.25});
  EXPECT_EQ(contents(path("run.csv")), "epoch,loss\n1,1\n2,0.5\n3,0.25\n");
}

// A kill after the checkpoint's rename and before the CSV's leaves the CSV an
// epoch behind; an edit or damage leaves anything at all. Resume restores it.
TEST_F(RunRecordTest, ResumeRebuildsTheCsvFromTheCheckpoint) {
  train_two_epochs();
  for (const std::string& csv : {std::string("epoch,loss\n1,1\n"), std::string("epoch,loss\n1,oops\n"), std::string()}) {
    std::ofstream(path("run.csv")) << csv;
    RunRecord resumed(options());
    resumed.resume(*model_, opt_);
    EXPECT_EQ(contents(path("run.csv")), "epoch,loss\n1,1\n2,0.5\n");
  }
  fs::remove(path("run.csv"));
  RunRecord(options()).resume(*model_, opt_);
  EXPECT_EQ(contents(path("run.csv")), "epoch,loss\n1,1\n2,0.5\n");
}

TEST_F(RunRecordTest, RefusesACheckpointOfAnotherRun) {
  train_two_epochs();
  RunRecord other_lr(options("0.2"));
  EXPECT_THROW_MSG(other_lr.resume(*model_, opt_), "checkpoint " + path("run.safetensors") +
                                                       " was written with --lr 0.1; this run has --lr 0.2: resume "
                                                       "with the settings of the run it continues");
  RunRecord::Options more = options();
  more.settings["--width"] = "8";
  EXPECT_THROW_MSG(RunRecord(more).resume(*model_, opt_), "does not record --width");
  RunRecord::Options columns = options();
  columns.columns = {"epoch", "loss", "accuracy"};
  EXPECT_THROW_MSG(RunRecord(columns).resume(*model_, opt_), "the metrics have the columns 'epoch,loss'");

  // An epoch count that disagrees with the rows (re-checksummed, so only this check can tell).
  nn::Checkpoint c = nn::load_safetensors(path("run.safetensors"));
  c.metadata["epoch"] = "5";
  nn::save_safetensors(path("run.safetensors"), c.tensors, c.metadata);
  EXPECT_THROW_MSG(RunRecord(options()).resume(*model_, opt_), "has 2 metrics rows for 5 finished epochs");
}

// The settings are compared before the state is restored: a resume with
// another model shape names the flag that changed it, not the first tensor
// whose shape differs.
TEST_F(RunRecordTest, AnotherModelShapeIsRefusedByItsFlag) {
  RunRecord::Options width2 = options();
  width2.settings["--width"] = "2";
  {
    RunRecord record(width2);
    model_->forward(ones({1, 2})).sum().backward();
    opt_.step();
    record.commit_epoch(*model_, opt_, {.epoch = 1, .step = 1}, {1, 1});
  }
  RunRecord::Options width3 = options();
  width3.settings["--width"] = "3";
  nn::Linear wider(3, 1);
  optim::SGD wider_opt(wider->parameters(), {.lr = 0.1});
  EXPECT_THROW_MSG(RunRecord(width3).resume(*wider, wider_opt),
                   "checkpoint " + path("run.safetensors") + " was written with --width 2; this run has --width 3");
  // Another program or layout is named before the settings are looked at.
  RunRecord::Options ddp = width3;
  ddp.writer = {"trainer", "ddp"};
  EXPECT_THROW_MSG(RunRecord(ddp).resume(*wider, wider_opt), "was written by trainer (one device); this run is "
                                                              "trainer (ddp)");
  EXPECT_EQ(RunRecord(width2).resume(*model_, opt_).epoch, 1);
}

TEST_F(RunRecordTest, ChecksOutputsBeforeTraining) {
  RunRecord::Options in_a_folder = options();
  in_a_folder.metrics = dir_.string();
  EXPECT_THROW_MSG(RunRecord(in_a_folder).check_writable(), "--metrics " + dir_.string() + ": is a folder");
  RunRecord::Options nowhere = options();
  nowhere.checkpoint = path("missing/run.safetensors");
  EXPECT_THROW_MSG(RunRecord(nowhere).check_writable(), "--checkpoint: cannot write");
}

}  // namespace
}  // namespace loom::examples
