// Training checkpoints: an exact round trip, and every way a tampered or
// foreign file could resume the wrong state is a clear error naming the file.
#include "optim/training_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "tests/test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class TrainingCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("train_ckpt_" + std::to_string(getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    manual_seed(1);
    model_ = nn::Linear(3, 2);
    opt_ = std::make_unique<optim::AdamW>(model_->parameters());
    model_->forward(ones({4, 3})).sum().backward();
    opt_->step();
    optim::save_training_checkpoint(path(), *model_, *opt_, {.epoch = 2, .step = 7, .extra = {{"note", "x"}}});
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name = "run.safetensors") const { return (dir_ / name).string(); }

  // The checkpoint's tensors and metadata, rewritten with `edit` applied (loom's checksums recomputed).
  std::string rewritten(const std::function<void(nn::Checkpoint&)>& edit) {
    nn::Checkpoint c = nn::load_safetensors(path());
    edit(c);
    nn::save_safetensors(path("edited.safetensors"), c.tensors, c.metadata);
    return path("edited.safetensors");
  }

  nn::Linear model_{nullptr};
  std::unique_ptr<optim::AdamW> opt_;
  fs::path dir_;
};

TEST_F(TrainingCheckpointTest, RoundTripRestoresEverything) {
  const GeneratorState rng = default_generator().state();
  randn({10});  // moves the generator on; loading must put it back
  manual_seed(9);
  nn::Linear other(3, 2);
  optim::AdamW other_opt(other->parameters());
  optim::TrainingProgress p = optim::load_training_checkpoint(path(), *other, other_opt);
  EXPECT_EQ(p.epoch, 2);
  EXPECT_EQ(p.step, 7);
  EXPECT_EQ(p.extra, (std::map<std::string, std::string>{{"note", "x"}}));
  EXPECT_EQ(default_generator().state().offset, rng.offset);
  EXPECT_EQ(testing::values(other->weight), testing::values(model_->weight));
  EXPECT_EQ(other_opt.state_dict().size(), opt_->state_dict().size());
}

TEST_F(TrainingCheckpointTest, MetadataNumbersAreStrict) {
  for (const std::string bad : {"-1", "3x", "", " 3", "+3", "1e3", "99999999999999999999", "9223372036854775808"}) {
    SCOPED_TRACE(bad);
    const std::string edited = rewritten([&](nn::Checkpoint& c) { c.metadata["epoch"] = bad; });
    EXPECT_THROW_MSG(optim::load_training_checkpoint(edited, *model_, *opt_), "metadata 'epoch' is '" + bad + "'");
  }
  const std::string missing = rewritten([](nn::Checkpoint& c) { c.metadata.erase("rng_offset"); });
  EXPECT_THROW_MSG(optim::load_training_checkpoint(missing, *model_, *opt_), "metadata 'rng_offset' is missing");
}

TEST_F(TrainingCheckpointTest, ForeignAndIncompleteFilesAreRefusedNamingTheFile) {
  // The same tensors and metadata without loom's checksums, as another tool would write them.
  nn::Checkpoint c = nn::load_safetensors(path());
  nlohmann::json header = {{"__metadata__", c.metadata}};
  std::string data;
  for (const auto& [name, t] : c.tensors) {
    header[name] = {{"dtype", nn::safetensors_dtype_name(t.dtype())}, {"shape", t.shape().vec()},
                    {"data_offsets", {data.size(), data.size() + t.nbytes()}}};
    data.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream(path("plain"), std::ios::binary) << std::string(reinterpret_cast<const char*>(&n), 8) << text << data;
  EXPECT_THROW_MSG(optim::load_training_checkpoint(path("plain"), *model_, *opt_),
                   "training checkpoint " + path("plain") + ": has no checksums");

  const std::string dropped = rewritten([](nn::Checkpoint& c) {
    c.tensors.erase(std::remove_if(c.tensors.begin(), c.tensors.end(),
                                   [](const auto& e) { return e.first == "optim.state.0.exp_avg_sq"; }),
                    c.tensors.end());
  });
  EXPECT_THROW_MSG(optim::load_training_checkpoint(dropped, *model_, *opt_),
                   "training checkpoint " + dropped + ": optimizer state: parameter 0 has taken steps but");
  nn::Linear wider(4, 2);
  optim::AdamW wider_opt(wider->parameters());
  EXPECT_THROW_MSG(optim::load_training_checkpoint(path(), *wider, wider_opt),
                   "training checkpoint " + path() + ": optimizer state:");
  const std::string stray = rewritten([](nn::Checkpoint& c) { c.tensors.emplace_back("other.x", zeros({1})); });
  EXPECT_THROW_MSG(optim::load_training_checkpoint(stray, *model_, *opt_), "unexpected tensor 'other.x'");
}

}  // namespace
}  // namespace loom
