// pipeline_fashion_mnist: the Fashion-MNIST CNN of fashion_mnist_cnn, trained
// with pipeline parallelism: the model cut into stages, each batch into
// micro-batches that flow through them in a GPipe or 1F1B schedule.
//
//   bazel run //examples:pipeline_fashion_mnist -- --stages 2             # stages as threads, one process
//   mpirun -np 2 bazel-bin/examples/pipeline_fashion_mnist --epochs 5     # one stage per rank
//   (as root add --allow-run-as-root --oversubscribe; see docs/comm.md)
//
// The global batch and learning rate are those of the single-device example,
// and a pipeline step equals a step on the whole batch, so it reaches the
// same accuracy. Under mpirun every rank reads the whole batch (rank 0 uses
// the images, the last rank the labels); the last rank reports, and before
// each evaluation the ranks share their stages' weights.
#include <sstream>

#include "examples/common/fashion_mnist_training.h"
#include "examples/common/program.h"
#include "nn/functional.h"
#include "examples/common/ranks.h"
#include "parallel/comm/init.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/pipeline.h"

namespace {

using namespace loom;

// Where the CNN's ten children are cut: after the first conv block, the
// second, and the hidden Linear layer.
std::vector<int> cuts_for(int stages) {
  const std::vector<int> all{3, 6, 8};
  LOOM_CHECK(stages >= 1 && stages <= 4, "the CNN is cut into 1 to 4 stages, not ", stages);
  return std::vector<int>(all.begin(), all.begin() + (stages - 1));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom::examples;
  // A rank that fails (a bad flag included) ends the whole job at once.
  return run_program(
      "pipeline_fashion_mnist",
      [&] {
        std::shared_ptr<parallel::ProcessGroup> group = parallel::init(argc, argv);
        FashionMnistConfig config;
        config.name = "pipeline_fashion_mnist";
        Flags flags("Train a CNN on Fashion-MNIST with pipeline parallelism (stages as threads, or ranks under mpirun)");
        add_fashion_mnist_flags(flags, config);
        int stages = 2, micro_batches = 4;
        std::string schedule = "1f1b";
        auto* stages_flag =
            flags.add("--stages", stages, "pipeline stages (under mpirun: the ranks)", Scope::Job, integer_in(1, 4));
        flags.add("--micro-batches", micro_batches, "micro-batches per batch", Scope::Job, integer_in(1, 60000));
        flags.add("--schedule", schedule, "gpipe or 1f1b", Scope::Job, CLI::IsMember({"gpipe", "1f1b"}));
        flags.parse(argc, argv);
        const Rank me = join_job(group, flags, config.device);  // NCCL when each rank has its own GPU
        group = me.group;
        config.device = me.device.str();

        const bool over_ranks = group->size() > 1;
        if (over_ranks) {
          LOOM_CHECK(stages_flag->count() == 0 || stages == group->size(), "--stages ", stages, " under mpirun -np ",
                     group->size(), ": leave it out, there is one stage per rank");
          stages = group->size();
        }
        const std::vector<int> cuts = cuts_for(stages);
        const parallel::PipelineOptions options{
            .micro_batches = micro_batches,
            .schedule = schedule == "gpipe" ? parallel::ScheduleKind::GPipe : parallel::ScheduleKind::OneFOneB};
        auto cross_entropy = [](const Tensor& out, const Tensor& y) { return nn::functional::cross_entropy(out, y); };
        const Device device = me.device;

        std::vector<nn::ModulePtr> parts;  // the model's stages (all of them, on every rank)
        std::shared_ptr<parallel::Pipeline> pipeline;
        std::shared_ptr<parallel::DistributedPipeline> distributed;
        Strategy strategy;
        strategy.wrap = [&, cuts, options, device](const nn::ModulePtr& model) {
          // The stages share the model's layers: training them trains the model.
          parts = parallel::split_sequential(nn::Sequential(std::static_pointer_cast<nn::SequentialImpl>(model)), cuts);
          if (over_ranks)
            distributed = std::make_shared<parallel::DistributedPipeline>(parts[group->rank()], group, options, device);
          else
            pipeline = std::make_shared<parallel::Pipeline>(parts, std::vector<Device>(parts.size(), device), options);
          return model;
        };
        strategy.train_step = [&, cross_entropy](const Tensor& x, const Tensor& y) {
          if (!over_ranks) return pipeline->train_step(x, y, cross_entropy);
          return distributed->train_step(x, y, cross_entropy);  // the loss: on the last rank
        };
        strategy.min_batch = micro_batches;
        if (over_ranks) {
          strategy.group = group;
          strategy.shard_batches = false;
          strategy.reporting_rank = group->size() - 1;
          strategy.before_evaluation = [&] { parallel::share_stage_weights(parts, *group); };
        }
        train_fashion_mnist(config, flags, strategy);
        return 0;
      },
      parallel::abandon_job);
}
