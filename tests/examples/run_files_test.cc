// RunFiles: outputs that are one file, however spelled (relative, "..",
// through a linked folder), or that would replace an input or land inside an
// input folder, are refused naming both flags; a link named as an output,
// which AtomicFile replaces rather than follows, is not a conflict.
#include "examples/common/run_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"

namespace loom::examples {
namespace {

namespace fs = std::filesystem;

class RunFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("run_files_" + std::to_string(getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "data");
    fs::create_directories(dir_ / "out");
    std::ofstream(dir_ / "data" / "train.gz") << "images";
    std::ofstream(dir_ / "run.safetensors") << "checkpoint";
    previous_ = fs::current_path();
    fs::current_path(dir_);  // relative spellings are relative to here
  }
  void TearDown() override {
    fs::current_path(previous_);
    fs::remove_all(dir_);
  }
  std::string abs(const std::string& name) const { return (fs::canonical(dir_) / name).string(); }
  fs::path dir_, previous_;
};

TEST_F(RunFilesTest, DistinctFilesPass) {
  RunFiles files;
  files.reads_folder("--data", "data");
  files.reads("--checkpoint", "run.safetensors");
  files.writes("--checkpoint", "run.safetensors");  // --resume reads the file it then rewrites
  files.writes("--metrics", "out/run.csv");
  files.writes("--trace", "out/trace.json");
  files.writes("--metrics", "missing-folder/run.csv");  // not this check's business: AtomicFile's
  files.check();
}

TEST_F(RunFilesTest, OutputsThatAreOneFileHoweverSpelled) {
  fs::create_directory_symlink("out", "linked");
  for (const std::string& other : std::vector<std::string>{"out/run.csv", "./out/run.csv", "data/../out/run.csv",
                                                           "linked/run.csv", abs("out/run.csv")}) {
    SCOPED_TRACE(other);
    RunFiles files;
    files.writes("--checkpoint", other);
    files.writes("--metrics", "out/run.csv");
    EXPECT_THROW_MSG(files.check(), "--metrics out/run.csv and --checkpoint " + other + " are one file (" +
                                        abs("out/run.csv") + "): each write would replace the other");
  }
}

TEST_F(RunFilesTest, OutputsThatWouldReplaceAnInput) {
  RunFiles files;
  files.reads("--checkpoint", "run.safetensors");
  files.writes("--trace", "./run.safetensors");
  EXPECT_THROW_MSG(files.check(), "--trace ./run.safetensors would replace --checkpoint run.safetensors, which this "
                                  "run reads (" + abs("run.safetensors") + ")");
  // An input named through a link: its target is read, so writing the target replaces it.
  fs::create_symlink("out/m.csv", "resume-link");
  std::ofstream("out/m.csv") << "rows";
  RunFiles linked;
  linked.reads("--checkpoint", "resume-link");
  linked.writes("--metrics", "out/m.csv");
  EXPECT_THROW_MSG(linked.check(), "--metrics out/m.csv would replace --checkpoint resume-link");
}

TEST_F(RunFilesTest, ALinkNamedAsAnOutputIsReplacedNotFollowed) {
  fs::create_symlink("run.safetensors", "metrics-link.csv");
  RunFiles files;
  files.reads("--checkpoint", "run.safetensors");
  files.writes("--metrics", "metrics-link.csv");  // the rename replaces the link, not the checkpoint
  files.check();
}

TEST_F(RunFilesTest, OutputsInsideAnInputFolder) {
  fs::create_directory_symlink("data", "data-link");
  for (const std::string out : {"data/train.gz", "data/new.csv", "out/../data/new.csv", "data-link/new.csv"}) {
    SCOPED_TRACE(out);
    RunFiles files;
    files.reads_folder("--data", "data-link");
    files.writes("--metrics", out);
    EXPECT_THROW_MSG(files.check(), "--metrics " + out + " is inside the folder --data data-link (" + abs("data") +
                                        "), which this run reads; write outputs elsewhere");
  }
  // The link that names the folder is part of the input: a write there would replace it with a file.
  RunFiles files;
  files.reads_folder("--data", "data-link");
  files.writes("--metrics", "data-link");
  EXPECT_THROW_MSG(files.check(), "--metrics data-link would replace --data data-link");
}

// A data folder of links to files elsewhere (as tests build them): writing
// one of those files would replace what the folder's link reads.
TEST_F(RunFilesTest, WhatAFoldersLinksPointToIsAnInputToo) {
  fs::create_directories("elsewhere");
  std::ofstream("elsewhere/labels.gz") << "labels";
  fs::create_symlink("../elsewhere/labels.gz", "data/labels.gz");
  RunFiles files;
  files.reads_folder("--data", "data");
  files.writes("--metrics", "elsewhere/labels.gz");
  EXPECT_THROW_MSG(files.check(), "--metrics elsewhere/labels.gz would replace --data data, which this run reads (" +
                                      abs("elsewhere/labels.gz") + ")");
}

}  // namespace
}  // namespace loom::examples
