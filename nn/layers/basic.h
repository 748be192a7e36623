// Small layers without much state: Embedding, Dropout, Flatten, activations.
//
//   nn::Embedding tok(65, 384);       // token ids (B, T) -> (B, T, 384)
//   nn::Dropout drop(0.1);            // active in train(), identity in eval()
#pragma once

#include "nn/functional.h"
#include "nn/module.h"

namespace loom::nn {

struct EmbeddingOptions {
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
};

class EmbeddingImpl : public Cloneable<EmbeddingImpl> {
 public:
  using Options = EmbeddingOptions;
  explicit EmbeddingImpl(const EmbeddingOptions& options);
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim)
      : EmbeddingImpl(EmbeddingOptions{num_embeddings, embedding_dim}) {}
  void reset() override;  // N(0, 1), as PyTorch
  Tensor forward(const Tensor& indices) override;
  void pretty_print(std::ostream& out) const override;
  EmbeddingOptions options;
  Tensor weight;
};
LOOM_MODULE(Embedding);

struct DropoutOptions {
  double p = 0.5;
};

// Draws its masks from the default generator, so manual_seed makes them repeat.
class DropoutImpl : public Cloneable<DropoutImpl> {
 public:
  using Options = DropoutOptions;
  explicit DropoutImpl(const DropoutOptions& options = {});
  explicit DropoutImpl(double p) : DropoutImpl(DropoutOptions{p}) {}
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;
  DropoutOptions options;
};
LOOM_MODULE(Dropout);

struct FlattenOptions {
  int64_t start_dim = 1;
  int64_t end_dim = -1;
};

class FlattenImpl : public Cloneable<FlattenImpl> {
 public:
  using Options = FlattenOptions;
  explicit FlattenImpl(const FlattenOptions& options = {}) : Cloneable("Flatten"), options(options) {}
  Tensor forward(const Tensor& x) override { return x.flatten(options.start_dim, options.end_dim); }
  void pretty_print(std::ostream& out) const override;
  FlattenOptions options;
};
LOOM_MODULE(Flatten);

// Stateless activations.
class ReLUImpl : public Cloneable<ReLUImpl> {
 public:
  ReLUImpl() : Cloneable("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};
LOOM_MODULE(ReLU);

class TanhImpl : public Cloneable<TanhImpl> {
 public:
  TanhImpl() : Cloneable("Tanh") {}
  Tensor forward(const Tensor& x) override { return tanh(x); }
};
LOOM_MODULE(Tanh);

class SigmoidImpl : public Cloneable<SigmoidImpl> {
 public:
  SigmoidImpl() : Cloneable("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};
LOOM_MODULE(Sigmoid);

struct GELUOptions {
  GeluApproximation approximate = GeluApproximation::None;
};

class GELUImpl : public Cloneable<GELUImpl> {
 public:
  using Options = GELUOptions;
  explicit GELUImpl(const GELUOptions& options = {}) : Cloneable("GELU"), options(options) {}
  Tensor forward(const Tensor& x) override { return gelu(x, options.approximate); }
  void pretty_print(std::ostream& out) const override;
  GELUOptions options;
};
LOOM_MODULE(GELU);

struct SoftmaxOptions {
  int64_t dim = -1;
};

class SoftmaxImpl : public Cloneable<SoftmaxImpl> {
 public:
  using Options = SoftmaxOptions;
  explicit SoftmaxImpl(const SoftmaxOptions& options = {}) : Cloneable("Softmax"), options(options) {}
  explicit SoftmaxImpl(int64_t dim) : SoftmaxImpl(SoftmaxOptions{dim}) {}
  Tensor forward(const Tensor& x) override { return softmax(x, options.dim); }
  void pretty_print(std::ostream& out) const override;
  SoftmaxOptions options;
};
LOOM_MODULE(Softmax);

}  // namespace loom::nn
