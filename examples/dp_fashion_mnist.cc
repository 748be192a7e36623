// dp_fashion_mnist: the Fashion-MNIST CNN of fashion_mnist_cnn, trained with
// DataParallel: one process, one replica per device, each step's batch split
// among them.
//
//   bazel run //examples:dp_fashion_mnist -- --replicas 2            # two CPU replicas
//   bazel run //examples:dp_fashion_mnist -- --devices cuda:0,cuda:1
//
// Same global batch, same learning rate, so it reaches the accuracy of the
// single-device run (BatchNorm-free model: the same weights up to rounding).
// The loop is fashion_mnist_cnn's, with the model called through DataParallel.
#include "examples/common/fashion_mnist.h"
#include "examples/common/program.h"
#include "nn/functional.h"
#include "parallel/data_parallel.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  return run_program("dp_fashion_mnist", [&] {
    FashionMnistConfig config;
    config.name = "dp_fashion_mnist";
    Flags flags("Train a CNN on Fashion-MNIST with DataParallel");
    add_fashion_mnist_flags(flags, config);
    constexpr int kMaxReplicas = 256;  // bounds --replicas and the length of --devices alike
    int replicas = 2;
    std::string devices;
    flags.add("--replicas", replicas, "replicas on --device (several may share it)", Scope::Job,
              integer_in(1, kMaxReplicas));
    flags.add("--devices", devices, "comma-separated device list, e.g. cuda:0,cuda:1 (overrides --replicas)",
              Scope::Job, device_list(kMaxReplicas));
    flags.parse(argc, argv);  // a bad --devices is a usage error here, before any data is read
    const std::vector<Device> replica_devices = devices.empty()
                                                    ? std::vector<Device>(replicas, Device::parse(config.device))
                                                    : parse_device_list(devices, kMaxReplicas);

    FashionMnist run(config, flags, replica_devices.front(), {.layout = "DataParallel"});  // batches arrive on the first device
    parallel::DataParallel dp(run.model, replica_devices);      // replicas of the model on the others
    for (int64_t epoch = run.first_epoch(); epoch <= config.epochs; ++epoch) {
      for (auto& [x, y] : run.batches(epoch)) {
        Tensor loss = nn::functional::cross_entropy(dp->forward(x), y);  // scattered, run, gathered
        run.optimizer.zero_grad();
        loss.backward();  // the replicas' gradients end up summed in run.model
        run.optimizer.step();
        if (!run.step_done(loss)) break;
      }
      if (!run.end_epoch(epoch)) break;
    }
    return run.finish();
  });
}
