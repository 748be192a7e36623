#include "parallel/pipeline/stage_links.h"

#include "parallel/trace.h"

namespace loom::parallel {

Tensor StageLinks::receive_activation(int chunk, int micro_batch) {
  trace::Span wait("wait activation", "idle", lane_);
  return take_activation(chunk, micro_batch);
}

void StageLinks::send_activation(int chunk, int micro_batch, const Tensor& activation) {
  if (put_activation(chunk, micro_batch, activation)) bytes_sent_ += static_cast<int64_t>(activation.nbytes());
}

Tensor StageLinks::receive_gradient(int chunk, int micro_batch, const Tensor& output) {
  trace::Span wait("wait gradient", "idle", lane_);
  return take_gradient(chunk, micro_batch, output);
}

void StageLinks::send_gradient(int chunk, int micro_batch, const Tensor& gradient) {
  if (put_gradient(chunk, micro_batch, gradient)) bytes_sent_ += static_cast<int64_t>(gradient.nbytes());
}

}  // namespace loom::parallel
