// Sharded data parallelism over the threads backend: every strategy equals
// single-device training step after step, for 1, 2 and 3 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "tests/parallel/sharding_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

using testing::ShardCase;

struct Models {
  nn::ModulePtr reference, local;
};

void expect_zero_matches_single_device(int world, ShardCase c) {
  testing::run_prepared_ranks<Models>(
      world,
      [](int rank) {
        auto [reference, local] = testing::sharded_models(rank);
        return Models{reference, local};
      },
      [&](const std::shared_ptr<ProcessGroup>& group, Models& m) {
        testing::check_zero_matches_single_device(group, m.reference, m.local, c);
      });
}

class ZeroTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroTest, Stage1MatchesSingleDevice) { expect_zero_matches_single_device(GetParam(), {.stage = 1}); }
TEST_P(ZeroTest, Stage2MatchesSingleDevice) { expect_zero_matches_single_device(GetParam(), {.stage = 2}); }
// Small buckets: many reduce-scatters, stage 2's in flight two at a time, some pieces of a few elements.
TEST_P(ZeroTest, Stage1SmallBuckets) {
  expect_zero_matches_single_device(GetParam(), {.stage = 1, .bucket_cap_bytes = 512});
}
TEST_P(ZeroTest, Stage2SmallBuckets) {
  expect_zero_matches_single_device(GetParam(), {.stage = 2, .bucket_cap_bytes = 512});
}
TEST_P(ZeroTest, Stage1AccumulatesGradients) {
  expect_zero_matches_single_device(GetParam(), {.stage = 1, .bucket_cap_bytes = 2048, .micro_batches = 3});
}
TEST_P(ZeroTest, Stage2RejectsASecondBackward) {
  testing::run_rank_threads(GetParam(), [](int, const std::shared_ptr<ProcessGroup>& group) {
    testing::check_zero2_rejects_a_second_backward(group);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroTest, ::testing::Values(1, 2, 3));

std::string temp_dir(const std::string& name);

struct ResumeModels {
  nn::ModulePtr reference, local, fresh;
};

TEST(ZeroCheckpoint, EachRankResumesFromItsOwnState) {
  const std::string dir = temp_dir("zero");
  for (int stage : {1, 2})
    testing::run_prepared_ranks<ResumeModels>(
        2,
        [](int rank) {
          auto [reference, local] = testing::sharded_models(rank);
          return ResumeModels{reference, local, testing::sharded_models(rank + 1).second};
        },
        [&](const std::shared_ptr<ProcessGroup>& group, ResumeModels& m) {
          testing::check_zero_resume(group, m.reference, m.local, m.fresh, stage, dir);
        });
  // Three ranks cannot take two ranks' shards; a plain optimizer's state is not ZeRO's.
  testing::run_rank_threads(3, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    nn::ModulePtr net = testing::make_net(false);
    ZeroRedundancyOptimizer opt(net->parameters(), group, testing::make_adamw);
    nn::StateDict state;
    for (auto& [key, t] : nn::load_safetensors(dir + "/zero1-rank" + std::to_string(std::min(rank, 1)) + ".safetensors").tensors)
      if (key.compare(0, 10, "optimizer.") == 0) state.emplace_back(key.substr(10), t);
    EXPECT_THROW_MSG(opt.load_state_dict(state), "loaded by rank " + std::to_string(rank) + " of 3");
    EXPECT_THROW_MSG(opt.load_state_dict(testing::make_adamw(net->parameters())->state_dict()),
                     "unexpected entry 'lr' (a plain optimizer's state?");
  });
}

// One rank: the allocator sees exactly what the rank holds.
TEST(ZeroMemory, OneRankMatchesTheModel) {
  for (int stage : {1, 2})
    testing::run_rank_threads(1, [stage](int, const std::shared_ptr<ProcessGroup>& group) {
      testing::check_zero_memory(group, stage);
    });
}

// ---- FSDP ----

using testing::FsdpCase;
using testing::Units;

void expect_fsdp_matches_single_device(int world, FsdpCase c) {
  testing::run_prepared_ranks<Models>(
      world,
      [&](int rank) {
        auto [reference, local] = testing::fsdp_models(rank, c.units);
        return Models{reference, local};
      },
      [&](const std::shared_ptr<ProcessGroup>& group, Models& m) {
        testing::check_fsdp_matches_single_device(group, m.reference, m.local, c);
      });
}

class FsdpTest : public ::testing::TestWithParam<int> {};

TEST_P(FsdpTest, OneUnitMatchesSingleDevice) { expect_fsdp_matches_single_device(GetParam(), {.units = Units::Whole}); }
TEST_P(FsdpTest, UnitPerLayerMatchesSingleDevice) {
  expect_fsdp_matches_single_device(GetParam(), {.units = Units::Layers});
}
TEST_P(FsdpTest, NestedUnitsMatchSingleDevice) {
  expect_fsdp_matches_single_device(GetParam(), {.units = Units::Nested});
}
TEST_P(FsdpTest, WithoutPrefetchMatchesSingleDevice) {
  expect_fsdp_matches_single_device(GetParam(), {.units = Units::Layers, .prefetch = false});
}
TEST_P(FsdpTest, AccumulatesGradients) {
  expect_fsdp_matches_single_device(GetParam(), {.units = Units::Nested, .micro_batches = 3, .steps = 3});
}

TEST_P(FsdpTest, MovesOneAndAHalfTimesDdpsBytes) {
  testing::run_prepared_ranks<Models>(
      GetParam(), [](int rank) { return Models{nullptr, testing::fsdp_models(rank, Units::Layers).second}; },
      [](const std::shared_ptr<ProcessGroup>& group, Models& m) { testing::check_fsdp_traffic(group, m.local); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, FsdpTest, ::testing::Values(1, 2, 3));

// ---- FSDP checkpoints ----

std::string temp_dir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

Models layered_models(int rank) {
  auto [reference, local] = testing::fsdp_models(rank, Units::Layers);
  return Models{reference, local};
}

TEST(FsdpCheckpoint, FullStateLoadsOnOneDevice) {
  const std::string path = temp_dir("full") + "/model.safetensors";
  testing::run_prepared_ranks<Models>(2, layered_models, [&](const std::shared_ptr<ProcessGroup>& group, Models& m) {
    testing::check_fsdp_full_state_loads_on_one_device(group, m.reference, m.local, path);
  });
}

ResumeModels resume_models(int rank) {
  auto [reference, local] = testing::fsdp_models(rank, Units::Layers);
  auto [unused, fresh] = testing::fsdp_models(rank + 1, Units::Layers);  // scrambled on every rank
  return {reference, local, fresh};
}

TEST(FsdpCheckpoint, ShardedSaveAtTwoLoadsAtTwo) {
  const std::string dir = temp_dir("sharded");
  testing::run_prepared_ranks<ResumeModels>(2, resume_models,
                                            [&](const std::shared_ptr<ProcessGroup>& group, ResumeModels& m) {
                                              testing::check_fsdp_sharded_resume(group, m.reference, m.local, m.fresh, dir);
                                            });
}

TEST(FsdpCheckpoint, FullSaveAtTwoResumesAtThree) {
  const std::string path = temp_dir("resize") + "/full.safetensors";
  // The reference trains its first two steps here, on one device.
  auto [reference, unused] = testing::fsdp_models(0, Units::Layers);
  auto opt_reference = testing::make_adamw(reference->parameters());
  testing::train_reference_steps(*reference, *opt_reference, 0, 2, {});
  testing::run_prepared_ranks<Models>(2, layered_models, [&](const std::shared_ptr<ProcessGroup>& group, Models& m) {
    testing::fsdp_train_and_save_full(group, m.local, path);
  });
  // Three ranks; only rank 0 compares against the reference (they share it, so the others train without one).
  testing::run_prepared_ranks<ResumeModels>(3, resume_models,
                                            [&](const std::shared_ptr<ProcessGroup>& group, ResumeModels& m) {
                                              if (group->rank() == 0)
                                                testing::fsdp_resume_full(group, reference, std::move(opt_reference),
                                                                          m.fresh, path);
                                              else
                                                testing::fsdp_resume_full(group, nullptr, nullptr, m.fresh, path);
                                            });
}

TEST(FsdpCheckpoint, ShardedLoadRefusesWhatDoesNotMatch) {
  const std::string dir = temp_dir("refuse");
  testing::run_prepared_ranks<ResumeModels>(2, resume_models,
                                            [&](const std::shared_ptr<ProcessGroup>& group, ResumeModels& m) {
                                              testing::check_fsdp_sharded_resume(group, m.reference, m.local, m.fresh, dir);
                                            });
  // Three ranks cannot take two ranks' shards.
  testing::run_prepared_ranks<ResumeModels>(3, resume_models,
                                            [&](const std::shared_ptr<ProcessGroup>& group, ResumeModels& m) {
                                              testing::FsdpTraining t = testing::fsdp_training(group, nullptr, m.fresh, {});
                                              EXPECT_THROW_MSG(load_sharded(dir, *t.fsdp, *t.opt),
                                                               "the sharded checkpoint was saved by 2 ranks, but this "
                                                               "job has 3");
                                            });
  // A shard in another rank's place: its pieces have other sizes (the last
  // Linear's 51 elements are 26 + 25).
  std::filesystem::copy_file(dir + "/shard-0-of-2.safetensors", dir + "/shard-1-of-2.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  testing::run_prepared_ranks<ResumeModels>(2, resume_models,
                                            [&](const std::shared_ptr<ProcessGroup>& group, ResumeModels& m) {
                                              testing::FsdpTraining t = testing::fsdp_training(group, nullptr, m.fresh, {});
                                              if (group->rank() == 1)
                                                EXPECT_THROW_MSG(load_sharded(dir, *t.fsdp, *t.opt), "a mismatched shard");
                                            });
  // A missing shard names itself.
  std::filesystem::remove(dir + "/shard-1-of-2.safetensors");
  testing::run_prepared_ranks<ResumeModels>(2, resume_models,
                                            [&](const std::shared_ptr<ProcessGroup>& group, ResumeModels& m) {
                                              testing::FsdpTraining t = testing::fsdp_training(group, nullptr, m.fresh, {});
                                              if (group->rank() == 1)
                                                EXPECT_THROW_MSG(load_sharded(dir, *t.fsdp, *t.opt),
                                                                 "the shard of rank 1 is missing");
                                            });
}

// A rank that leaves mid-step: the others' next collective fails, naming it.
TEST(Fsdp, ARankLeavingMidStepIsAnErrorOnTheOthers) {
  auto groups = ThreadGroup::create(2, testing::test_options());
  auto [ref0, local0] = testing::fsdp_models(0, Units::Layers);
  auto [ref1, local1] = testing::fsdp_models(1, Units::Layers);
  std::string error;
  std::thread leaver([&] {
    FullyShardedDataParallel fsdp(local1, groups[1], testing::fsdp_options({}));
    // Gone before its first forward: the model (whose units hold the group) and the group with it.
    fsdp = nullptr;
    local1.reset();
    groups[1].reset();
  });
  {
    FullyShardedDataParallel fsdp(local0, groups[0], testing::fsdp_options({}));
    leaver.join();
    try {
      fsdp->forward(randn({6, 2, 6, 6}, {.dtype = kFloat64}));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  EXPECT_NE(error.find("rank 1 has left the group"), std::string::npos) << error;
}



TEST(FsdpMemory, OneRankMatchesTheModel) {
  testing::run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) { testing::check_fsdp_memory(group); });
}

// A module that calls its child through a member handle, as a transformer block calls its attention.
class Residual : public nn::Module {
 public:
  Residual() : Module("Residual") { inner = register_module("inner", nn::Linear(4, 4)); }
  Tensor forward(const Tensor& x) override { return x + inner->forward(x); }
  nn::Linear inner{nullptr};
};

TEST(Fsdp, RejectsUnitsItCannotWrap) {
  testing::run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) {
    auto pick = [](std::string wanted) {
      return [wanted](const std::string& name, const nn::Module&) { return name == wanted; };
    };
    nn::Sequential with_residual(std::make_shared<Residual>(), nn::ReLU());
    EXPECT_THROW_MSG(FullyShardedDataParallel(with_residual, group, {.wrap = pick("0.inner")}),
                     "the wrap policy picked '0.inner', a child of a Residual; units must be children of a "
                     "Sequential or a ModuleList");
    nn::Sequential net(nn::Linear(4, 4), nn::Sequential(nn::Linear(4, 4), nn::ReLU()));
    EXPECT_THROW_MSG(FullyShardedDataParallel(net, group, {.wrap = pick("1.1")}),
                     "unit '1.1' has no parameters of its own");
  });
}

// eval() and train() reach the wrapped model, whose Dropout then stops
// dropping: its outputs are the unwrapped model's in eval mode.
TEST(Fsdp, EvalReachesTheWrappedModel) {
  testing::run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) {
    manual_seed(4);
    nn::Sequential net(nn::Linear(4, 8), nn::Dropout(0.5), nn::Linear(8, 2));
    nn::ModulePtr reference = net->clone();
    reference->eval();
    FullyShardedDataParallel fsdp(net, group, {.wrap = wrap_type<nn::LinearImpl>()});
    fsdp->eval();
    EXPECT_FALSE(net->is_training());
    EXPECT_FALSE((*net)[1]->is_training()) << "the Dropout";
    NoGradGuard no_grad;
    Tensor x = randn({5, 4});
    EXPECT_LT(loom::testing::max_rel_error(fsdp->forward(x), reference->forward(x)), 1e-6);
    fsdp->train();
    EXPECT_TRUE((*net)[1]->is_training());
  });
}

TEST(Zero, RejectsBadOptions) {
  testing::run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) {
    nn::Linear net(2, 2);
    EXPECT_THROW_MSG(ZeroRedundancyOptimizer(net->parameters(), group, testing::make_adamw, {.stage = 3}),
                     "stage must be 1 or 2, got 3 (FSDP shards the parameters too)");
    EXPECT_THROW_MSG(ZeroRedundancyOptimizer(net->parameters(), nullptr, testing::make_adamw), "no process group");
    EXPECT_THROW_MSG(ZeroRedundancyOptimizer(net->parameters(), group, [](TensorList) { return nullptr; }),
                     "`make` returned no optimizer");
  });
}

}  // namespace
}  // namespace loom::parallel
