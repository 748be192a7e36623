// AtomicFile and read_file: atomic replacement, no writing through planted
// links, stale temporaries of killed writers removed, and whole-file reads
// that refuse folders, devices, pipes and oversized files.
#include "tensor/file_io.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("file_io_" + std::to_string(getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string contents(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static void put(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

TEST_F(FileIoTest, WritesAndReplacesWholeFiles) {
  write_file_atomically(path("a.csv"), "first\n");
  EXPECT_EQ(contents(path("a.csv")), "first\n");
  write_file_atomically(path("a.csv"), "second\n");
  EXPECT_EQ(contents(path("a.csv")), "second\n");
  EXPECT_EQ(names(), std::vector<std::string>{"a.csv"});  // no temporary left behind
}

TEST_F(FileIoTest, UncommittedWriteLeavesTheTargetUntouched) {
  put(path("a.csv"), "old");
  {
    AtomicFile out(path("a.csv"));
    out.write("new, half written");
    EXPECT_TRUE(fs::exists(out.temporary_path()));
  }
  EXPECT_EQ(contents(path("a.csv")), "old");
  EXPECT_EQ(names(), std::vector<std::string>{"a.csv"});
}

TEST_F(FileIoTest, TemporariesHaveUnpredictableNames) {
  AtomicFile a(path("x")), b(path("x"));
  EXPECT_NE(a.temporary_path(), b.temporary_path());
  EXPECT_EQ(fs::path(a.temporary_path()).parent_path(), dir_);  // beside the target: the rename stays on one disk
}

// A link planted at the target, or at the fixed temporary name loom once
// used, never redirects a write into the file it points to.
TEST_F(FileIoTest, PlantedLinksAreReplacedNotFollowed) {
  put(path("victim"), "precious");
  fs::create_symlink(path("victim"), path("metrics.csv"));
  fs::create_symlink(path("victim"), path("metrics.csv.tmp"));
  write_file_atomically(path("metrics.csv"), "rows\n");
  EXPECT_EQ(contents(path("victim")), "precious");
  EXPECT_FALSE(fs::is_symlink(path("metrics.csv")));
  EXPECT_EQ(contents(path("metrics.csv")), "rows\n");
}

TEST_F(FileIoTest, RefusesFoldersDevicesAndMissingFolders) {
  fs::create_directories(path("folder"));
  EXPECT_THROW_MSG(write_file_atomically(path("folder"), "x"), "is a folder");
  EXPECT_THROW_MSG(AtomicFile::check_writable(path("folder"), "--metrics"), "--metrics " + path("folder") + ": is a folder");
  EXPECT_THROW_MSG(AtomicFile::check_writable("/dev/null", "--checkpoint"), "is not a regular file");
  EXPECT_THROW_MSG(AtomicFile::check_writable(path("no/such/x.csv"), "--metrics"), "No such file or directory");
  EXPECT_THROW_MSG(write_file_atomically(path("ends/"), "x"), "give a file name");
  AtomicFile::check_writable(path("fine.csv"), "--metrics");
  EXPECT_EQ(names(), std::vector<std::string>{"folder"});  // the check leaves nothing behind
}

TEST_F(FileIoTest, StaleTemporariesOfDeadWritersAreRemoved) {
  // A writer killed mid-write leaves its temporary; the next write to the same target removes it.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicFile out(path("run.csv"));
    out.write("partial");
    kill(getpid(), SIGKILL);  // dies with the temporary in place
  }
  waitpid(child, nullptr, 0);
  ASSERT_EQ(names().size(), 1u);
  const std::string stale = names()[0];
  EXPECT_NE(stale.find("run.csv.tmp-"), std::string::npos);
  AtomicFile live(path("run.csv"));  // a live writer's temporary (this process) must survive
  const std::string live_name = fs::path(live.temporary_path()).filename().string();
  write_file_atomically(path("run.csv"), "done\n");
  EXPECT_EQ(names(), (std::vector<std::string>{"run.csv", live_name}));
  EXPECT_EQ(contents(path("run.csv")), "done\n");
}

// A target whose name is as long as a name may be (255 bytes) still gets a
// temporary beside it: the temporary's name is cut and hashed to fit, two
// long names that differ only at the end get different ones, and a killed
// writer's temporary of a long name is still found and removed.
TEST_F(FileIoTest, LongNamesGetTemporariesWithinTheNameLimit) {
  const std::string longest = std::string(251, 'm') + ".csv", other = std::string(251, 'm') + ".txt";
  ASSERT_EQ(longest.size(), 255u);
  AtomicFile::check_writable(path(longest), "--metrics");
  {
    AtomicFile a(path(longest)), b(path(other));
    EXPECT_LE(fs::path(a.temporary_path()).filename().string().size(), 255u);
    const std::string a_name = fs::path(a.temporary_path()).filename().string();
    const std::string b_name = fs::path(b.temporary_path()).filename().string();
    EXPECT_NE(a_name.substr(0, a_name.find(".tmp-")), b_name.substr(0, b_name.find(".tmp-")));
  }
  write_file_atomically(path(longest), "rows\n");
  EXPECT_EQ(contents(path(longest)), "rows\n");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicFile out(path(longest));
    out.write("partial");
    kill(getpid(), SIGKILL);
  }
  waitpid(child, nullptr, 0);
  ASSERT_EQ(names().size(), 2u);  // the target and the dead writer's temporary
  write_file_atomically(path(longest), "again\n");
  EXPECT_EQ(names(), std::vector<std::string>{longest});
}

TEST_F(FileIoTest, ReadsRegularFilesOnly) {
  put(path("data"), std::string("a\0b", 3));
  EXPECT_EQ(read_file(path("data"), "checkpoint", 100), std::string("a\0b", 3));
  EXPECT_THROW_MSG(read_file(path("missing"), "checkpoint", 100), "checkpoint " + path("missing") + ": cannot open it");
  EXPECT_THROW_MSG(read_file(dir_.string(), "checkpoint", 100), "is a folder, not a file");
  EXPECT_THROW_MSG(read_file("/dev/zero", "checkpoint", 100), "is not a regular file");
  ASSERT_EQ(mkfifo(path("pipe").c_str(), 0600), 0);
  EXPECT_THROW_MSG(read_file(path("pipe"), "checkpoint", 100), "is not a regular file");  // and does not block
  EXPECT_THROW_MSG(read_file(path("data"), "checkpoint", 2), "has 3 bytes, more than the 2 a checkpoint may have");
}

TEST_F(FileIoTest, FileReaderReadsPiecesWithReadFilesChecks) {
  put(path("data"), "0123456789");
  const FileReader file(path("data"), "checkpoint", 100);
  EXPECT_EQ(file.size(), 10u);
  EXPECT_EQ(file.read(0, 4), "0123");
  EXPECT_EQ(file.read(8, 2), "89");
  EXPECT_EQ(file.read(10, 0), "");
  EXPECT_THROW_MSG(file.read(8, 3), "reading 3 bytes at 8 of 10");  // past the end: a caller's bug
  EXPECT_THROW_MSG(FileReader("/dev/zero", "checkpoint", 100), "checkpoint /dev/zero: is not a regular file");
  EXPECT_THROW_MSG(FileReader(path("data"), "checkpoint", 9), "has 10 bytes, more than the 9 a checkpoint may have");
}

}  // namespace
}  // namespace loom
