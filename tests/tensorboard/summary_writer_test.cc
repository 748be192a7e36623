// SummaryWriter's files read back by the tests' own reader (event_reader.h):
// the name, the first event, the scalars and histograms as written, when
// records reach the file, and the errors for folders it cannot write.
#include "tensorboard/summary_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "tensor/creation.h"
#include "tests/tensorboard/event_reader.h"
#include "tests/test_util.h"

namespace loom::tensorboard {
namespace {

namespace fs = std::filesystem;

class SummaryWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("summary_writer_" + std::to_string(getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST_F(SummaryWriterTest, WritesScalarsAReaderGetsBack) {
  const double before = now();
  std::string file;
  {
    SummaryWriter writer(dir() + "/runs/a");  // parents made as needed, as PyTorch's makedirs
    file = writer.file();
    writer.add_scalar("loss_metrics/global_avg_loss", 2.5, 1);
    writer.add_scalar("lr", 1e-3, 1);
    writer.add_scalar("loss_metrics/global_avg_loss", 0.125, 100, /*walltime=*/1234.5);
  }
  const std::string name = fs::path(file).filename().string();
  EXPECT_EQ(fs::path(file).parent_path(), fs::path(dir() + "/runs/a"));
  EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
  EXPECT_NE(name.find("." + std::to_string(getpid()) + ".0"), std::string::npos) << name;

  const auto events = testing::read_events(file);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].step, 0);
  EXPECT_GE(events[0].wall_time, before - 1);
  EXPECT_LE(events[0].wall_time, now() + 1);
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].tag, "loss_metrics/global_avg_loss");
  EXPECT_EQ(events[1].values[0].simple_value, 2.5f);
  EXPECT_EQ(events[1].step, 1);
  EXPECT_EQ(events[2].values[0].tag, "lr");
  EXPECT_EQ(events[2].values[0].simple_value, 1e-3f);
  EXPECT_EQ(events[3].values[0].simple_value, 0.125f);
  EXPECT_EQ(events[3].step, 100);
  EXPECT_EQ(events[3].wall_time, 1234.5);
}

TEST_F(SummaryWriterTest, RecordsReachTheFileAtFlushAndEveryMaxQueue) {
  SummaryWriter writer(dir(), {.max_queue = 3, .flush_secs = 1e9});
  EXPECT_EQ(testing::read_events(writer.file()).size(), 1u);  // the file_version event, written at once
  writer.add_scalar("a", 1, 1);
  writer.add_scalar("a", 2, 2);
  EXPECT_EQ(testing::read_events(writer.file()).size(), 1u);  // buffered
  writer.add_scalar("a", 3, 3);                               // the third: all three written
  EXPECT_EQ(testing::read_events(writer.file()).size(), 4u);
  writer.add_scalar("a", 4, 4);
  writer.flush();
  EXPECT_EQ(testing::read_events(writer.file()).size(), 5u);
  bool torn = true;
  testing::read_records(testing::slurp(writer.file()), &torn);
  EXPECT_FALSE(torn);  // only whole records are written
}

TEST_F(SummaryWriterTest, FlushSecsZeroWritesEachRecordAtOnce) {
  SummaryWriter writer(dir(), {.flush_secs = 0});
  writer.add_scalar("a", 1, 1);
  EXPECT_EQ(testing::read_events(writer.file()).size(), 2u);
}

TEST_F(SummaryWriterTest, TwoWritersInOneFolderGetTwoFiles) {
  SummaryWriter a(dir()), b(dir());
  EXPECT_NE(a.file(), b.file());
  a.add_scalar("x", 1, 1);
  b.add_scalar("x", 2, 1);
  a.close();
  b.close();
  EXPECT_EQ(testing::read_events(a.file())[1].values[0].simple_value, 1.0f);
  EXPECT_EQ(testing::read_events(b.file())[1].values[0].simple_value, 2.0f);
}

TEST_F(SummaryWriterTest, HistogramOfATensor) {
  {
    SummaryWriter writer(dir());
    writer.add_histogram("weights/fc.weight", from_vector<float>({0, 1, 2, 3}), 5, /*bins=*/2);
    const auto events = testing::read_events(writer.file());
    EXPECT_EQ(events.size(), 1u);  // still buffered
    writer.close();
    const auto closed = testing::read_events(writer.file());
    ASSERT_EQ(closed.size(), 2u);
    EXPECT_EQ(closed[1].step, 5);
    EXPECT_EQ(closed[1].values[0].tag, "weights/fc.weight");
    EXPECT_EQ(closed[1].values[0].histo, std::vector<double>({0, 3, 4, 6, 14}));
    EXPECT_EQ(closed[1].values[0].bucket, std::vector<double>({2, 2}));  // [0, 1.5) and [1.5, 3]
  }
}

TEST_F(SummaryWriterTest, AddAfterCloseFails) {
  SummaryWriter writer(dir());
  writer.close();
  writer.close();  // again: nothing to do
  EXPECT_THROW_MSG(writer.add_scalar("a", 1, 1), "is closed");
}

TEST_F(SummaryWriterTest, AFolderItCannotMakeIsAnErrorNamingIt) {
  fs::create_directories(dir());
  std::ofstream(dir() + "/plain_file") << "x";
  // Root may write anywhere, so the folders fail by what they are, not by permissions.
  EXPECT_THROW_MSG(SummaryWriter(dir() + "/plain_file/runs"),
                   "SummaryWriter: cannot create the log folder '" + dir() + "/plain_file/runs'");
  EXPECT_THROW_MSG(SummaryWriter(dir() + "/plain_file"),
                   "SummaryWriter: the log folder '" + dir() + "/plain_file' is not a folder");
  EXPECT_THROW_MSG(SummaryWriter("/proc/loom_tensorboard"), "'/proc/loom_tensorboard'");
  EXPECT_THROW_MSG(SummaryWriter(""), "the log folder is empty");
}

TEST_F(SummaryWriterTest, RefusesOptionsThatNeverFlush) {
  EXPECT_THROW_MSG(SummaryWriter(dir(), {.max_queue = 0}), "max_queue 0; at least 1");
}

}  // namespace
}  // namespace loom::tensorboard
