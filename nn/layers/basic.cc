#include "nn/layers/basic.h"

#include "nn/init.h"

namespace loom::nn {

EmbeddingImpl::EmbeddingImpl(const EmbeddingOptions& o) : Cloneable("Embedding"), options(o) {
  LOOM_CHECK(o.num_embeddings > 0 && o.embedding_dim > 0, "Embedding: sizes must be positive, got ",
             o.num_embeddings, " x ", o.embedding_dim);
  reset();
}

void EmbeddingImpl::reset() {
  weight = register_parameter("weight", empty({options.num_embeddings, options.embedding_dim}));
  init::normal_(weight, 0, 1);
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  if (forward_override()) return forward_override()(indices);
  return functional::embedding(indices, weight);
}

void EmbeddingImpl::pretty_print(std::ostream& out) const {
  out << "Embedding(" << options.num_embeddings << ", " << options.embedding_dim << ")";
}

DropoutImpl::DropoutImpl(const DropoutOptions& o) : Cloneable("Dropout"), options(o) {
  LOOM_CHECK(o.p >= 0 && o.p <= 1, "Dropout: p must be in [0, 1], got ", o.p);
}

Tensor DropoutImpl::forward(const Tensor& x) {
  if (forward_override()) return forward_override()(x);
  return functional::dropout(x, options.p, is_training());
}

void DropoutImpl::pretty_print(std::ostream& out) const { out << "Dropout(p=" << options.p << ")"; }

void FlattenImpl::pretty_print(std::ostream& out) const {
  out << "Flatten(start_dim=" << options.start_dim << ", end_dim=" << options.end_dim << ")";
}

void GELUImpl::pretty_print(std::ostream& out) const {
  out << "GELU(approximate=" << (options.approximate == GeluApproximation::Tanh ? "'tanh'" : "'none'") << ")";
}

void SoftmaxImpl::pretty_print(std::ostream& out) const { out << "Softmax(dim=" << options.dim << ")"; }

}  // namespace loom::nn
