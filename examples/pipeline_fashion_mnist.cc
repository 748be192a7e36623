// pipeline_fashion_mnist: the Fashion-MNIST CNN of fashion_mnist_cnn, trained
// with pipeline parallelism: the model cut into stages, each batch into
// micro-batches that flow through them in a GPipe, 1F1B, interleaved 1F1B
// (the model cut into stages x chunks parts, each stage running --chunks of
// them), zero-bubble ZB-H1 (each backward split in two, the weights'
// gradients filling the stages' waits) or ZB-V schedule (ZB-H1's split with
// two chunks a stage placed in a V: stage s runs parts s and 2p - 1 - s, so
// stage 0 also computes the loss).
//
//   bazel run //examples:pipeline_fashion_mnist -- --stages 2             # stages as threads, one process
//   bazel run //examples:pipeline_fashion_mnist -- --stages 2 --schedule interleaved --chunks 2
//   bazel run //examples:pipeline_fashion_mnist -- --stages 4 --micro-batches 8 --schedule zb-h1 --timeline
//   bazel run //examples:pipeline_fashion_mnist -- --stages 2 --micro-batches 8 --schedule zb-v --timeline
//   bazel run //examples:pipeline_fashion_mnist -- --stages 4 --balance time   # cuts from measured layer times
//   bazel run //examples:pipeline_fashion_mnist -- --schedule zb-v --balance time  # and the V scheduled for them
//   mpirun -np 2 bazel-bin/examples/pipeline_fashion_mnist --epochs 5     # one stage per rank
//   (as root add --allow-run-as-root --oversubscribe; see docs/comm.md)
//
// The global batch and learning rate are those of the single-device example,
// and a pipeline step equals a step on the whole batch, so it reaches the
// same accuracy. The loop is fashion_mnist_cnn's with the forward and
// backward of a batch done by the pipeline's train_step. Under mpirun every
// rank reads the whole batch (rank 0 uses the images, the rank with the last
// part the labels); that rank has the loss and reports, and before each
// evaluation the ranks share their stages' weights and optimizer state, so
// that its checkpoint holds the whole training state and --resume works
// over ranks as in one process (each only with its own: the layouts differ).
#include <algorithm>
#include <map>

#include "examples/common/fashion_mnist.h"
#include "examples/common/program.h"
#include "examples/common/ranks.h"
#include "nn/functional.h"
#include "parallel/comm/init.h"
#include "parallel/pipeline/balance.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/pipeline.h"

namespace {

using namespace loom;

// Where the CNN's ten children are cut into `parts`: after the first conv
// block, the second and the hidden Linear layer first, then inside the blocks.
std::vector<int> cuts_for(int parts) {
  const std::vector<int> by_preference{3, 6, 8, 1, 4, 7, 9};
  LOOM_CHECK(parts >= 1 && parts <= static_cast<int>(by_preference.size()) + 1, "the CNN is cut into at most ",
             by_preference.size() + 1, " parts (stages x chunks), not ", parts);
  std::vector<int> cuts(by_preference.begin(), by_preference.begin() + (parts - 1));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// Cuts for `parts` stages of about equal time, and each part's forward,
// input-gradient and weight-gradient times (zb-v builds its schedule for
// them), measured on a batch of zeros on rank 0; the other ranks take rank
// 0's (their own timings would differ, and every rank must cut and schedule alike).
struct TimedPlan {
  std::vector<int> cuts;
  std::vector<parallel::PassTimes> part_times;
};
TimedPlan timed_plan(const nn::Sequential& model, const examples::FashionMnistConfig& config,
                     const examples::Rank& me, int parts) {
  LOOM_CHECK(parts <= static_cast<int>(model->size()), "the CNN has ", model->size(), " layers: it cannot make ", parts,
             " parts (stages x chunks)");
  TimedPlan plan;
  if (me.group->rank() == 0) {
    const parallel::ChildCosts costs =
        parallel::time_children(model, zeros({config.batch_size, 1, 28, 28}, {.device = me.device}));
    plan.cuts = parallel::balanced_boundaries(costs.seconds(), parts);
    plan.part_times = parallel::part_pass_times(costs, plan.cuts);
  }
  if (me.group->size() > 1) {
    parallel::share_boundaries(plan.cuts, *me.group, me.device);
    parallel::share_part_times(plan.part_times, *me.group, me.device);
  }
  return plan;
}

std::string text(const std::vector<int>& cuts) {
  std::string out = "{";
  for (size_t i = 0; i < cuts.size(); ++i) out += (i ? ", " : "") + std::to_string(cuts[i]);
  return out + "}";
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) { return nn::functional::cross_entropy(logits, labels); }

}  // namespace

int main(int argc, char** argv) {
  using namespace loom::examples;
  // A rank that fails (a bad flag included) ends the whole job at once.
  return run_program(
      "pipeline_fashion_mnist",
      [&] {
        auto world = parallel::init(argc, argv);
        FashionMnistConfig config;
        config.name = "pipeline_fashion_mnist";
        Flags flags("Train a CNN on Fashion-MNIST with pipeline parallelism (stages as threads, or ranks under mpirun)");
        add_fashion_mnist_flags(flags, config);
        int stages = 2, micro_batches = 4, chunks = 2;
        std::string schedule = "1f1b";
        auto* stages_flag =
            flags.add("--stages", stages, "pipeline stages (under mpirun: the ranks)", Scope::Job, integer_in(1, 8));
        flags.add("--micro-batches", micro_batches, "micro-batches per batch", Scope::Job, integer_in(1, 60000));
        flags.add("--schedule", schedule,
                  "gpipe, 1f1b, interleaved (1F1B over --chunks model chunks per stage), zb-h1 (zero bubble), "
                  "zb-h2 (zero bubble, forwards run ahead: twice zb-h1's memory) or zb-v (zero bubble, two chunks "
                  "per stage in a V)",
                  Scope::Job, CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"}));
        flags.add("--chunks", chunks, "interleaved: model chunks per stage (micro-batches: a multiple of the stages)",
                  Scope::Job, integer_in(1, 8));
        std::string balance = "layers";
        flags.add("--balance", balance,
                  "where to cut the CNN: layers (fixed cuts by layer count) or time (stages of about equal "
                  "forward + backward time, measured on a batch first; zb-v is then scheduled for the measured times)",
                  Scope::Job, CLI::IsMember({"time", "layers"}));
        bool draw_timeline = false;
        flags.add_switch("--timeline", draw_timeline,
                         "at the end, draw the last step: each stage's passes where they ran, idle time as dots",
                         Scope::Job);
        flags.parse(argc, argv);
        const Rank me = join_job(world, flags, config.device);
        const bool over_ranks = me.group->size() > 1;
        if (over_ranks) {
          LOOM_CHECK(stages_flag->count() == 0 || stages == me.group->size(), "--stages ", stages, " under mpirun -np ",
                     me.group->size(), ": leave it out, there is one stage per rank");
          stages = me.group->size();
        }
        const parallel::ScheduleKind kind = parallel::schedule_kind(schedule);
        chunks = parallel::chunks_for(kind, chunks);  // --chunks is the interleaved schedule's
        parallel::PipelineOptions options{.micro_batches = micro_batches, .schedule = kind, .chunks = chunks};
        const parallel::Placement placement = parallel::placement_of(kind);
        const int loss_stage = parallel::place_part(stages * chunks - 1, stages, chunks, placement).stage;

        // A batch needs an image per micro-batch.
        Ranks ranks{.layout = "pipeline, stages as threads", .min_batch = micro_batches};
        if (over_ranks) ranks = {.layout = "pipeline over ranks", .group = me.group, .shard_batches = false,
                                 .reporting_rank = loss_stage, .min_batch = micro_batches};
        FashionMnist run(config, flags, me.device, ranks);
        // The parts share the model's layers: training them trains run.model.
        // Part i runs on stage i % stages (one part per stage unless
        // interleaved), or in ZB-V's V.
        TimedPlan plan;
        if (balance == "time")
          plan = timed_plan(run.model, config, me, stages * chunks);
        else
          plan.cuts = cuts_for(stages * chunks);
        const std::vector<int>& cuts = plan.cuts;
        if (me.group->rank() == 0 && stages * chunks > 1)
          std::printf("cut before layers %s (by %s)\n", text(cuts).c_str(), balance.c_str());
        if (parallel::built_for_pass_times(kind) && !plan.part_times.empty()) {
          options.part_times = plan.part_times;  // scheduled for the parts' measured F, I and W
          if (me.group->rank() == 0) std::printf("%s scheduled for the parts' measured pass times\n", schedule.c_str());
        }
        const std::vector<nn::ModulePtr> parts = parallel::split_sequential(run.model, cuts);
        std::unique_ptr<parallel::Pipeline> in_process;
        std::unique_ptr<parallel::DistributedPipeline> over;
        if (over_ranks)
          over = std::make_unique<parallel::DistributedPipeline>(
              parallel::stage_chunks(parts, me.group->rank(), stages, placement), me.group, options, me.device);
        else
          in_process = std::make_unique<parallel::Pipeline>(parts, std::vector<Device>(stages, me.device), options);

        for (int64_t epoch = run.first_epoch(); epoch <= config.epochs; ++epoch) {
          for (auto& [x, y] : run.batches(epoch)) {
            run.optimizer.zero_grad();
            // Forward and backward of every micro-batch, in the schedule's order; the loss: on loss_stage.
            Tensor loss = over_ranks ? over->train_step(x, y, cross_entropy) : in_process->train_step(x, y, cross_entropy);
            run.optimizer.step();
            if (!run.step_done(loss)) break;  // a stop signal: every rank stops after this step
          }
          if (over_ranks) {
            parallel::share_stage_weights(parts, *me.group, placement);  // every rank evaluates it all
            parallel::share_stage_optimizer_state(parts, run.optimizer, *me.group, placement);  // the checkpoint holds it all
          }
          if (!run.end_epoch(epoch)) break;
        }
        const int status = run.finish();
        if (draw_timeline) {  // over ranks, every rank takes part and rank 0 draws
          const std::string chart = over ? over->timeline() : parallel::timeline(in_process->stats());
          if (me.group->rank() == 0) std::printf("the last step, as measured:\n%s", chart.c_str());
        }
        return status;
      },
      parallel::abandon_job);
}
