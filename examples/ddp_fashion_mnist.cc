// ddp_fashion_mnist: the Fashion-MNIST CNN of fashion_mnist_cnn, trained with
// DistributedDataParallel: one process per rank, each reading its share of
// every global batch, gradients averaged over ranks during backward.
//
//   mpirun -np 2 bazel-bin/examples/ddp_fashion_mnist --epochs 5
//   (as root add --allow-run-as-root --oversubscribe; see docs/comm.md)
//
// Started without mpirun it runs as one rank. Each rank takes
// --batch-size / ranks images per step, so it trains on the same global
// batches as the single-device example and reaches the same accuracy.
#include "examples/common/fashion_mnist_training.h"
#include "examples/common/program.h"
#include "examples/common/ranks.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  // A rank that fails (a bad flag included) ends the whole job at once.
  return run_program(
      "ddp_fashion_mnist",
      [&] {
        std::shared_ptr<parallel::ProcessGroup> group = parallel::init(argc, argv);
        FashionMnistConfig config;
        config.name = "ddp_fashion_mnist";
        Flags flags("Train a CNN on Fashion-MNIST with DistributedDataParallel (run under mpirun)");
        add_fashion_mnist_flags(flags, config);
        int64_t bucket_mb = 25;
        flags.add("--bucket-mb", bucket_mb, "gradient bucket cap in MiB", Scope::Job, integer_in<int64_t>(1, 1 << 20));
        flags.parse(argc, argv);
        const Rank me = join_job(group, flags, config.device);  // NCCL when each rank has its own GPU
        group = me.group;
        config.device = me.device.str();

        Strategy strategy;
        strategy.wrap = [&](const nn::ModulePtr& model) -> nn::ModulePtr {
          return parallel::DistributedDataParallel(model, group, {.bucket_cap_bytes = bucket_mb << 20}).ptr();
        };
        strategy.group = group;
        train_fashion_mnist(config, flags, strategy);
        return 0;
      },
      parallel::abandon_job);
}
