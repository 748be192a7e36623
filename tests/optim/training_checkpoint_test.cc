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

const optim::CheckpointWriter kMe{.program = "trainer", .layout = "one device"};

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
    optim::save_training_checkpoint(path(), *model_, *opt_, {.epoch = 2, .step = 7, .extra = {{"note", "x"}}}, kMe);
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
  optim::TrainingProgress p = optim::load_training_checkpoint(path(), *other, other_opt, kMe);
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
    EXPECT_THROW_MSG(optim::load_training_checkpoint(edited, *model_, *opt_, kMe), "metadata 'epoch' is '" + bad + "'");
  }
  const std::string missing = rewritten([](nn::Checkpoint& c) { c.metadata.erase("rng_offset"); });
  EXPECT_THROW_MSG(optim::load_training_checkpoint(missing, *model_, *opt_, kMe), "metadata 'rng_offset' is missing");
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
  EXPECT_THROW_MSG(optim::load_training_checkpoint(path("plain"), *model_, *opt_, kMe),
                   "training checkpoint " + path("plain") + ": has no checksums");

  const std::string dropped = rewritten([](nn::Checkpoint& c) {
    c.tensors.erase(std::remove_if(c.tensors.begin(), c.tensors.end(),
                                   [](const auto& e) { return e.first == "optim.state.0.exp_avg_sq"; }),
                    c.tensors.end());
  });
  EXPECT_THROW_MSG(optim::load_training_checkpoint(dropped, *model_, *opt_, kMe),
                   "training checkpoint " + dropped + ": the optimizer state of parameter 'weight' lacks "
                   "'state.0.exp_avg_sq', which a parameter has once it has stepped: the file is incomplete");
  nn::Linear wider(4, 2);
  optim::AdamW wider_opt(wider->parameters());
  EXPECT_THROW_MSG(optim::load_training_checkpoint(path(), *wider, wider_opt, kMe),
                   "training checkpoint " + path() + ": the optimizer state 'state.0.exp_avg' has shape [2, 3] but "
                   "parameter 'weight' has shape [2, 4]");
  const std::string stray = rewritten([](nn::Checkpoint& c) { c.tensors.emplace_back("other.x", zeros({1})); });
  EXPECT_THROW_MSG(optim::load_training_checkpoint(stray, *model_, *opt_, kMe), "unexpected tensor 'other.x'");
}

// The file says who wrote it; another program's or layout's file is refused
// naming both, before any of its tensors is looked at.
TEST_F(TrainingCheckpointTest, RecordsWhoWroteItAndRefusesAnotherProgramOrLayout) {
  const nn::Checkpoint c = nn::load_safetensors(path());
  EXPECT_EQ(c.metadata.at("program"), "trainer");
  EXPECT_EQ(c.metadata.at("layout"), "one device");
  EXPECT_EQ(c.metadata.at("optimizer_params"), R"(["weight","bias"])");
  const optim::TrainingCheckpoint read = optim::read_training_checkpoint(path(), kMe);
  EXPECT_EQ(read.writer.program, "trainer");
  EXPECT_EQ(read.optimizer_params, (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(read.progress.extra, (std::map<std::string, std::string>{{"note", "x"}}));  // loom's own keys left out

  EXPECT_THROW_MSG(optim::load_training_checkpoint(path(), *model_, *opt_, {"ddp_trainer", "ddp"}),
                   "checkpoint " + path() + " was written by trainer (one device); this run is ddp_trainer (ddp): "
                   "only a run of the same program and layout can continue it");
  EXPECT_THROW_MSG(optim::read_training_checkpoint(path(), {"trainer", "pipeline stage 1 of 2"}),
                   "was written by trainer (one device); this run is trainer (pipeline stage 1 of 2)");
  const std::string anonymous = rewritten([](nn::Checkpoint& c) { c.metadata.erase("layout"); });
  EXPECT_THROW_MSG(optim::read_training_checkpoint(anonymous, kMe),
                   "training checkpoint " + anonymous + " does not say which program and layout wrote it");
  const std::string garbled = rewritten([](nn::Checkpoint& c) { c.metadata["optimizer_params"] = "[\"weight\", 3]"; });
  EXPECT_THROW_MSG(optim::read_training_checkpoint(garbled, kMe), "'optimizer_params' is not a JSON list of names");

  EXPECT_THROW_MSG(optim::save_training_checkpoint(path("x"), *model_, *opt_, {}, {"trainer", ""}),
                   "name the program and the layout that write it");
  EXPECT_THROW_MSG(optim::save_training_checkpoint(path("x"), *model_, *opt_, {.extra = {{"layout", "mine"}}}, kMe),
                   "extra key 'layout' is reserved");
}

// Every entry of one parameter's optimizer state removed, and the checksums
// recomputed over what is left: the file is consistent, but incomplete.
TEST_F(TrainingCheckpointTest, OptimizerStateLackingAParametersEntriesIsRefused) {
  const std::string lacking = rewritten([](nn::Checkpoint& c) {
    c.tensors.erase(std::remove_if(c.tensors.begin(), c.tensors.end(),
                                   [](const auto& e) { return e.first.rfind("optim.state.1.", 0) == 0; }),
                    c.tensors.end());
  });
  EXPECT_EQ(nn::load_safetensors(lacking).tensors.size(), nn::load_safetensors(path()).tensors.size() - 3);
  manual_seed(9);
  nn::Linear other(3, 2);
  optim::AdamW other_opt(other->parameters());
  const std::vector<double> before = testing::values(other->weight);
  ASSERT_NE(before, testing::values(model_->weight));
  EXPECT_THROW_MSG(optim::load_training_checkpoint(lacking, *other, other_opt, kMe),
                   "training checkpoint " + lacking + ": the optimizer state of parameter 'bias' lacks 'state.1.step' "
                   "(saved for every parameter): the file is incomplete");
  // The whole file is checked before anything is restored.
  EXPECT_EQ(testing::values(other->weight), before);
}

// An optimizer over part of the model (a pipeline stage's, say) or over its
// parameters in another order cannot continue the file's.
TEST_F(TrainingCheckpointTest, OptimizerMustStepTheSameParametersInTheSameOrder) {
  optim::AdamW bias_only({model_->bias});
  EXPECT_THROW_MSG(optim::load_training_checkpoint(path(), *model_, bias_only, kMe),
                   "its optimizer steps 2 parameters, this run's 1 (saved for another model, or for part of one)");
  optim::AdamW reversed({model_->bias, model_->weight});
  EXPECT_THROW_MSG(optim::load_training_checkpoint(path(), *model_, reversed, kMe),
                   "optimizer parameter 0 is 'weight' in the file but 'bias' in this run");
}

}  // namespace
}  // namespace loom
