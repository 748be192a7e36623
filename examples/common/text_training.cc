#include "examples/common/text_training.h"

#include "nn/functional.h"

namespace loom::examples {

data::Batch random_windows(const data::CharDataset& dataset, int64_t batch, Generator& generator, Device device) {
  std::vector<int64_t> offsets(batch);
  for (int64_t& o : offsets) o = static_cast<int64_t>(generator.next_u64() % static_cast<uint64_t>(dataset.size()));
  data::Batch b = dataset.get_batch(offsets);
  return {b.input.to(device), b.target.to(device)};
}

Tensor next_token_loss(const Tensor& logits, const Tensor& targets) {
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

double estimate_loss(nn::Module& model, const LanguageModel& forward, const data::CharDataset& dataset,
                     int64_t batch, int64_t batches, Device device) {
  NoGradGuard no_grad;
  model.eval();
  Generator fixed(1234);
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    data::Batch b = random_windows(dataset, batch, fixed, device);
    total += next_token_loss(forward(b.input), b.target).item();
  }
  model.train();
  return total / batches;
}

}  // namespace loom::examples
