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
#include <sstream>

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
    int replicas = 2;
    std::string devices;
    flags.add("--replicas", replicas, "replicas on --device (several may share it)", Scope::Job, integer_in(1, 256));
    flags.add("--devices", devices, "comma-separated device list, e.g. cuda:0,cuda:1 (overrides --replicas)",
              Scope::Job);
    flags.parse(argc, argv);
    std::vector<Device> device_list(replicas, Device::parse(config.device));
    if (!devices.empty()) {
      device_list.clear();
      std::stringstream list(devices);
      for (std::string name; std::getline(list, name, ',');) {
        try {
          device_list.push_back(Device::parse(name));
        } catch (const Error& e) {
          LOOM_FAIL("--devices: ", e.what());
        }
      }
    }

    FashionMnist run(config, flags, device_list.front(), {.layout = "DataParallel"});  // batches arrive on the first device
    parallel::DataParallel dp(run.model, device_list);      // replicas of the model on the others
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
