// The resume fuzzer's target as a regular test: over valid checkpoints, every
// one-bit flip and every truncation of them, and the checked-in corpus that
// libFuzzer grew (examples/common/fuzz/corpus). Valid files must resume;
// every damaged one must be refused with loom::Error (the checksums leave no
// flip unnoticed); nothing may crash or throw anything else.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>

#include "examples/common/fuzz/resume_target.h"
#include "optim/training_checkpoint.h"
#include "tensor/creation.h"
#include "tensor/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace loom::examples {
namespace {

namespace fs = std::filesystem;
using fuzz::ResumeTarget;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class ResumeFuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("resume_fuzz_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    seeds_ = valid_seeds();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Checkpoints of the target's run after epochs 1 and 2, as training writes them.
  // With LOOM_RESUME_SEEDS_DIR set they are also written there (tools/fuzz.sh's seeds).
  std::vector<std::string> valid_seeds() {
    ResumeTarget run;
    const std::string path = (dir_ / "seed.safetensors").string();
    RunRecord record(ResumeTarget::options(path));
    std::vector<std::string> seeds;
    for (int64_t epoch = 1; epoch <= 2; ++epoch) {
      run.optimizer.zero_grad();
      run.model->forward(ones({5, 3})).sum().backward();
      run.optimizer.step();
      record.commit_epoch(*run.model, run.optimizer, {.epoch = epoch, .step = 4 * epoch},
                          {static_cast<double>(epoch), 4.0 * epoch, 1.0 / epoch});
      seeds.push_back(read(path));
      if (const char* out = std::getenv("LOOM_RESUME_SEEDS_DIR"))
        std::ofstream(fs::path(out) / ("seed-epoch" + std::to_string(epoch)), std::ios::binary) << seeds.back();
    }
    return seeds;
  }

  // True when `bytes` resume, false when refused with loom::Error (its
  // message in *why); anything else escapes and fails the test.
  bool resumes(const std::string& bytes, std::string* why = nullptr) {
    const std::string path = (dir_ / "input.safetensors").string();
    std::ofstream(path, std::ios::binary) << bytes;
    RunRecord record(ResumeTarget::options(path));
    try {
      record.resume(*target_.model, target_.optimizer);
      return true;
    } catch (const Error& e) {
      if (why) *why = e.what();
      return false;
    }
  }

  fs::path dir_;
  ResumeTarget target_;
  std::vector<std::string> seeds_;
};

TEST_F(ResumeFuzzTest, ValidCheckpointsResume) {
  for (const std::string& seed : seeds_) {
    EXPECT_TRUE(resumes(seed));
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
  }
}

TEST_F(ResumeFuzzTest, EveryFlippedBitIsRefused) {
  int64_t tried = 0, resumed = 0;
  for (const std::string& seed : seeds_) {
    for (size_t i = 0; i < seed.size(); ++i) {
      std::string flipped = seed;
      flipped[i] ^= static_cast<char>(1 << (i * 5 % 8));  // one bit of every byte, each bit position in turn
      ++tried;
      if (resumes(flipped)) {
        ++resumed;
        ADD_FAILURE() << "a checkpoint with byte " << i << " flipped resumed";
      }
    }
  }
  EXPECT_GT(tried, 1000);
  EXPECT_EQ(resumed, 0);
}

// Resealed (checksums recomputed), flips reach the checks behind the
// checksums; none may crash, and the deeper checks must refuse what they see.
TEST_F(ResumeFuzzTest, ResealedFlipsReachTheChecksBehindTheChecksums) {
  const std::string& seed = seeds_.back();
  uint64_t header = 0;
  std::memcpy(&header, seed.data(), 8);
  std::map<std::string, int> refusals;  // by the start of the message after the file name
  int resumed = 0;
  for (size_t i = 8; i < 8 + header; ++i) {
    std::string flipped = seed;
    flipped[i] ^= static_cast<char>(1 << (i * 3 % 8));
    std::optional<std::string> sealed = fuzz::resealed(flipped);
    if (!sealed) continue;
    std::string why;
    if (resumes(*sealed, &why)) {
      ++resumed;  // a flip in a metrics value, say: a different but well-formed record
    } else {
      ++refusals[why.find("checksum") != std::string::npos ? "checksum" : "deeper"];
    }
  }
  EXPECT_GT(refusals["deeper"], 100) << "resealed inputs should mostly reach the checks behind the checksums";
  EXPECT_EQ(refusals["checksum"], 0) << "resealing should leave no checksum wrong";
  EXPECT_LT(resumed, refusals["deeper"]);
}

TEST_F(ResumeFuzzTest, EveryTruncationIsRefused) {
  const std::string& seed = seeds_.back();
  for (size_t n = 0; n < seed.size(); ++n) EXPECT_FALSE(resumes(seed.substr(0, n))) << n << " bytes";
}

TEST_F(ResumeFuzzTest, CheckedInCorpusRunsCleanly) {
  const fs::path corpus = "examples/common/fuzz/corpus";
  int files = 0;
  for (const auto& entry : fs::directory_iterator(corpus)) {
    const std::string bytes = read(entry.path());
    SCOPED_TRACE(entry.path().string());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    ++files;
  }
  EXPECT_GT(files, 0) << "no corpus in " << corpus;
}

// The corpus must carry the metadata checkpoints carry now (program, layout,
// optimizer_params): without it every input that parses stops at the check of
// who wrote the file, and the fuzzer starts from nothing deeper. Resealed as
// the fuzzer does, some inputs must get through the whole read of the
// checkpoint (parse, checksums, writer, metadata numbers, optimizer_params) to
// the settings, metrics rows and optimizer state behind it, and few may be
// refused for their writer. Most of a libFuzzer corpus breaks the header's
// JSON (55 of 80 in both corpora below). The corpus made before those fields
// (2026-11-23) had 0 of 80 read whole and 3 refused for their writer; the one
// made on 2026-11-28 (docs/fuzzing.md) has 6 read whole and 0 refused for
// their writer.
TEST_F(ResumeFuzzTest, CheckedInCorpusReachesPastTheWriterCheck) {
  const std::string path = (dir_ / "corpus.safetensors").string();
  const optim::CheckpointWriter writer = ResumeTarget::options(path).writer;
  std::map<std::string, int> outcomes;
  int files = 0;
  for (const auto& entry : fs::directory_iterator("examples/common/fuzz/corpus")) {
    ++files;
    const std::optional<std::string> sealed = fuzz::resealed(read(entry.path()));
    if (!sealed) {
      ++outcomes["no JSON header"];
      continue;
    }
    std::ofstream(path, std::ios::binary) << *sealed;
    try {
      optim::read_training_checkpoint(path, writer);
      ++outcomes["read whole"];
    } catch (const Error& e) {
      const std::string why = e.what();
      ++outcomes[why.find("does not say which program and layout wrote it") != std::string::npos ||
                         why.find(" was written by ") != std::string::npos
                     ? "refused for its writer"
                     : "refused otherwise"];
    }
  }
  std::string counts;
  for (const auto& [outcome, n] : outcomes) counts += outcome + ": " + std::to_string(n) + "; ";
  SCOPED_TRACE(counts);
  EXPECT_LE(20 * outcomes["refused for its writer"], files) << "more than a twentieth is refused for its writer";
  EXPECT_GE(20 * outcomes["read whole"], files) << "less than a twentieth gets through the checkpoint's read";
}

}  // namespace
}  // namespace loom::examples
