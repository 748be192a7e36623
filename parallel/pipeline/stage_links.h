// How a pipeline stage exchanges tensors with the stages before and after
// it. Each move names the stage's own chunk; the transport finds the
// neighbour: with p stages, chunk c of stage s is part c p + s of the model,
// so its input comes from part c p + s - 1 (stage s - 1, or stage p - 1's
// chunk c - 1) and its output goes to part c p + s + 1 (in ZB-V's V,
// place_part says where). The receives block until the tensor is there (or
// throw if it never will be) and show in a trace as the stage's idle time;
// the sends do not wait for the receiver and count their bytes when they
// leave the stage (the V's turn stays on its stage). A transport (mailboxes
// in one process, send/recv between ranks) implements the four moves.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace loom::parallel {

class StageLinks {
 public:
  explicit StageLinks(int lane) : lane_(lane) {}
  virtual ~StageLinks() = default;
  // The previous part's output for this micro-batch.
  Tensor receive_activation(int chunk, int micro_batch);
  void send_activation(int chunk, int micro_batch, const Tensor& activation);
  // The gradient of the loss with respect to this chunk's `output`.
  Tensor receive_gradient(int chunk, int micro_batch, const Tensor& output);
  void send_gradient(int chunk, int micro_batch, const Tensor& gradient);
  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  // The puts return whether the tensor left the stage.
  virtual Tensor take_activation(int chunk, int micro_batch) = 0;
  virtual bool put_activation(int chunk, int micro_batch, const Tensor& activation) = 0;
  virtual Tensor take_gradient(int chunk, int micro_batch, const Tensor& output) = 0;
  virtual bool put_gradient(int chunk, int micro_batch, const Tensor& gradient) = 0;

 private:
  int lane_;  // the trace lane of the stage's waits
  int64_t bytes_sent_ = 0;
};

}  // namespace loom::parallel
