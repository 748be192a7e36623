// A training program of your own, outside loom's tree: it sees loom only
// through <loom/loom.h>, and builds with CMake, pkg-config or Bazel (README.md).
//
//   ./train --steps 200                  # one process
//   mpirun -np 2 ./train --steps 200     # DDP: each rank takes half of every batch
//
// It trains a small residual MLP of its own on Fashion-MNIST with AdamW,
// prints the mean loss every --log-every steps, and ends with each rank's
// weights fingerprint (the same on every rank: DDP keeps the replicas equal)
// and rank 0's checkpoint of the model, optimizer and progress.
#include <loom/loom.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace nn = loom::nn;
using loom::Tensor;

// x -> embed -> one pre-norm residual block -> 10 logits.
class ResidualMlpImpl : public nn::Cloneable<ResidualMlpImpl> {
 public:
  explicit ResidualMlpImpl(int64_t width = 128) : Cloneable("ResidualMlp"), width(width) { reset(); }
  void reset() override {
    embed = register_module("embed", nn::Linear(28 * 28, width));
    norm = register_module("norm", nn::LayerNorm(width));
    expand = register_module("expand", nn::Linear(width, 2 * width));
    project = register_module("project", nn::Linear(2 * width, width));
    head = register_module("head", nn::Linear(width, 10));
  }
  Tensor forward(const Tensor& images) override {             // images: (B, 1, 28, 28)
    Tensor x = loom::gelu(embed(images.flatten(1)));           // (B, width)
    x = x + project(loom::gelu(expand(norm(x))));              // (B, width)
    return head(x);                                            // (B, 10)
  }
  int64_t width;
  nn::Linear embed{nullptr}, expand{nullptr}, project{nullptr}, head{nullptr};
  nn::LayerNorm norm{nullptr};
};
LOOM_MODULE(ResidualMlp);

// FNV-1a over every parameter's bytes: equal only if the weights are bit for bit.
uint64_t fingerprint(const nn::Module& model) {
  uint64_t hash = loom::kFnv1aStart;
  for (auto& [name, p] : model.named_parameters()) {
    Tensor host = p.to(loom::Device::cpu()).contiguous();
    hash = loom::fnv1a(host.data_ptr<float>(), host.nbytes(), hash);
  }
  return hash;
}

int64_t positive(const char* flag, const char* value) {
  char* end = nullptr;
  long long v = std::strtoll(value, &end, 10);
  if (*value == '\0' || *end != '\0' || v <= 0)
    throw std::invalid_argument(std::string(flag) + ": expected a positive integer, got '" + value + "'");
  return v;
}

int train(int argc, char** argv) {
  auto world = loom::parallel::init(argc, argv);  // under mpirun: one rank per process
  int64_t steps = 200, batch_size = 64, log_every = 20;
  std::string data = loom::data::FashionMnist::kDefaultRoot, device = "cpu", checkpoint = "standalone.safetensors";
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 == argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
    if (!std::strcmp(argv[i], "--steps")) steps = positive(argv[i], argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch-size")) batch_size = positive(argv[i], argv[i + 1]);
    else if (!std::strcmp(argv[i], "--log-every")) log_every = positive(argv[i], argv[i + 1]);
    else if (!std::strcmp(argv[i], "--data")) data = argv[i + 1];      // the IDX files' folder
    else if (!std::strcmp(argv[i], "--device")) device = argv[i + 1];  // cpu, or cuda: the local rank's GPU
    else if (!std::strcmp(argv[i], "--checkpoint")) checkpoint = argv[i + 1];
    else throw std::invalid_argument(std::string("unknown flag ") + argv[i]);
  }
  const int rank = world->rank(), ranks = world->size();
  if (batch_size % ranks != 0) throw std::invalid_argument("--batch-size must be a multiple of the ranks");
  if (rank == 0) std::printf("loom %s (%s), %d rank(s)\n", loom::version(), loom::build_info().cuda ? "CUDA" : "CPU only", ranks);

  loom::Device dev = loom::parallel::device_for_rank(device).device;
  auto group = loom::parallel::for_device(world, dev);  // MPI for CPU tensors, NCCL for GPUs
  ResidualMlp model;
  model->to(dev);
  loom::parallel::DistributedDataParallel ddp(model, group);  // rank 0's weights everywhere
  loom::optim::AdamW optimizer(ddp->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
  loom::data::DataLoader loader(loom::data::FashionMnist::train(data, {.normalize = true}),
                                {.batch_size = batch_size / ranks,  // this rank's share of a batch
                                 .drop_last = true,
                                 .sampler = loom::data::DistributedSampler(rank, ranks),
                                 .device = dev});

  int64_t step = 0, epoch = 0;
  double loss_sum = 0;
  for (; step < steps; ++epoch) {
    for (auto& [x, y] : loader.epoch(epoch, steps - step)) {
      Tensor loss = nn::functional::cross_entropy(ddp->forward(x), y);
      optimizer.zero_grad();
      loss.backward();  // gradients are averaged over the ranks while backward runs
      optimizer.step();
      loss_sum += loss.item();
      if (++step % log_every == 0 && rank == 0) {
        std::printf("step %lld loss %.4f\n", static_cast<long long>(step), loss_sum / log_every);
        loss_sum = 0;
      }
    }
  }
  std::printf("rank %d weights %016llx\n", rank, static_cast<unsigned long long>(fingerprint(*model)));
  if (rank == 0) {
    loom::optim::save_training_checkpoint(checkpoint, *model, optimizer, {.epoch = epoch, .step = step},
                                          {.program = "standalone", .layout = "ddp"});
    std::printf("saved %s\n", checkpoint.c_str());
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return train(argc, argv);
  } catch (const std::exception& e) {  // loom::Error names what was wrong (a missing file, a bad shape)
    std::fprintf(stderr, "train: %s\n", e.what());
    loom::parallel::abandon_job(e.what());  // under mpirun: the other ranks stop now, not at a timeout
    return 1;
  }
}
