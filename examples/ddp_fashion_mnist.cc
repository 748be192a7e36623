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
#include "parallel/comm/host_staged_group.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  std::shared_ptr<parallel::ProcessGroup> group;
  try {
    group = parallel::init(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "ddp_fashion_mnist: %s\n", e.what());
    return 1;
  }
  CLI::App app{"Train a CNN on Fashion-MNIST with DistributedDataParallel (run under mpirun)"};
  FashionMnistConfig config;
  config.name = "ddp_fashion_mnist";
  add_fashion_mnist_flags(app, config);
  int64_t bucket_mb = 25;
  app.add_option("--bucket-mb", bucket_mb, "gradient bucket cap in MiB")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // CUDA tensors travel between ranks through pinned host memory (there is no
  // NCCL backend yet; it would also refuse ranks that share a GPU).
  try {
    group = parallel::HostStagedGroup::for_device(group, Device::parse(config.device));
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", config.name.c_str(), e.what());
    return 1;
  }

  Strategy strategy;
  strategy.wrap = [&](const nn::ModulePtr& model) -> nn::ModulePtr {
    return parallel::DistributedDataParallel(model, group, {.bucket_cap_bytes = bucket_mb << 20}).ptr();
  };
  strategy.group = group;
  const int status = train_fashion_mnist(config, strategy);
  // It printed why; the other ranks may be waiting for this one.
  if (status != 0) parallel::abandon_job("training failed on rank " + std::to_string(group->rank()));
  return status;
}
