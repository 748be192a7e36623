#include "data/char_dataset.h"

#include "tensor/ops.h"

namespace loom::data {

CharDataset::CharDataset(const Tensor& tokens, int64_t block_size) : block_size_(block_size) {
  LOOM_CHECK(
      tokens.defined() && tokens.dim() == 1 && tokens.dtype() == kInt64 && tokens.device().is_cpu(),
      "CharDataset: expected a 1-D int64 CPU tensor of tokens, got ",
      tokens.defined() ? tokens.dtype() : kInt64, " of shape ",
      tokens.defined() ? tokens.shape() : Shape{}, tokens.defined() ? "" : " (undefined)");
  LOOM_CHECK(block_size >= 1, "CharDataset: block_size must be at least 1, got ", block_size);
  LOOM_CHECK(tokens.numel() > block_size, "CharDataset: ", tokens.numel(),
             " tokens are too few for block_size ", block_size,
             " (an example needs block_size + 1)");
  tokens_ = tokens.detach().contiguous();
}

Example CharDataset::get(int64_t index) const {
  check_index("CharDataset", index, size());
  return {tokens_.narrow(0, index, block_size_), tokens_.narrow(0, index + 1, block_size_)};
}

Batch CharDataset::get_batch(const std::vector<int64_t>& indices) const {
  LOOM_CHECK(!indices.empty(), "CharDataset::get_batch: no indices given");
  const auto batch = static_cast<int64_t>(indices.size());
  // positions: (B, T), row b = start_b + 0..T-1; targets read one further.
  Tensor positions = empty({batch, block_size_}, {.dtype = kInt64});
  int64_t* p = positions.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    check_index("CharDataset", indices[b], size());
    for (int64_t t = 0; t < block_size_; ++t) p[b * block_size_ + t] = indices[b] + t;
  }
  Tensor flat = positions.view({batch * block_size_});
  Tensor input = index_select(tokens_, 0, flat).view({batch, block_size_});
  Tensor target = index_select(tokens_, 0, flat.add_(1)).view({batch, block_size_});
  return {input, target};
}

}  // namespace loom::data
