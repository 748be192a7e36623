// ddp_fashion_mnist: the Fashion-MNIST CNN of fashion_mnist_cnn, trained with
// DistributedDataParallel: one process per rank, each reading its share of
// every global batch, gradients averaged over ranks during backward.
//
//   mpirun -np 2 bazel-bin/examples/ddp_fashion_mnist --epochs 5
//   mpirun -np 8 bazel-bin/examples/ddp_fashion_mnist --device cuda   # a GPU per rank, over NCCL
//   (as root add --allow-run-as-root --oversubscribe; see docs/comm.md)
//
// Started without mpirun it runs as one rank. Each rank takes
// --batch-size / ranks images per step, so it trains on the same global
// batches as the single-device example and reaches the same accuracy. The
// loop is fashion_mnist_cnn's; what DDP changes is marked.
#include "examples/common/fashion_mnist.h"
#include "examples/common/program.h"
#include "examples/common/ranks.h"
#include "nn/functional.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  // A rank that fails (a bad flag included) ends the whole job at once.
  return run_program(
      "ddp_fashion_mnist",
      [&] {
        auto world = parallel::init(argc, argv);  // DDP: one process per rank
        FashionMnistConfig config;
        config.name = "ddp_fashion_mnist";
        Flags flags("Train a CNN on Fashion-MNIST with DistributedDataParallel (run under mpirun)");
        add_fashion_mnist_flags(flags, config);
        int64_t bucket_mb = 25;
        flags.add("--bucket-mb", bucket_mb, "gradient bucket cap in MiB", Scope::Job, integer_in<int64_t>(1, 1 << 20));
        flags.parse(argc, argv);
        const Rank me = join_job(world, flags, config.device);  // settings agree; NCCL when each rank has a GPU

        // DDP: this rank's share of each batch. Rank 0's checkpoint holds the
        // whole state, so a run may resume it at another world size.
        FashionMnist run(config, flags, me.device, {.layout = "ddp", .group = me.group});
        parallel::DistributedDataParallel ddp(run.model, me.group,        // DDP: rank 0's weights everywhere
                                              {.bucket_cap_bytes = bucket_mb << 20});
        for (int64_t epoch = run.first_epoch(); epoch <= config.epochs; ++epoch) {
          for (auto& [x, y] : run.batches(epoch)) {
            Tensor loss = nn::functional::cross_entropy(ddp->forward(x), y);
            run.optimizer.zero_grad();
            loss.backward();  // DDP: buckets of gradients are averaged over the ranks while backward runs
            run.optimizer.step();
            if (!run.step_done(loss)) break;  // a stop signal on any rank: all stop after this step
          }
          if (!run.end_epoch(epoch)) break;
        }
        return run.finish();
      },
      parallel::abandon_job);
}
