// A CUDA graph: the CUDA backend's side of tensor/device_graph.h (read that
// first, for what a captured function may do).
//
// capture() records the calling thread's work on a stream of the graph's
// own, made current for the capture:
//   - the stream's blocks are the graph's private memory pool (block_pool.h):
//     no other stream takes them, and every replay reuses them in the order
//     the capture used them;
//   - host waits are errors that name what waited (host_waits.h), raised
//     before the wait (CUDA would only invalidate the capture);
//   - random ops draw relative to a (seed, offset origin) pair in device
//     memory (generator.h's Draw::device_state), one pair per generator used.
// replay() writes each generator's pair, taking from the generator the
// offsets the captured draws use (so an uncaptured step at that point would
// have drawn the same numbers), then launches the graph on the caller's
// current stream.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <cuda_runtime_api.h>

#include "tensor/backend.h"
#include "tensor/cuda/stream.h"
#include "tensor/generator.h"

namespace loom::cuda {

class CudaGraph final : public Backend::QueueObject, public DrawSink {
 public:
  explicit CudaGraph(int device);
  ~CudaGraph() override;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void capture(const std::function<void()>& work);
  void replay();

  // DrawSink: a draw of `generator` made while capturing.
  Draw take(Generator& generator) override;

 private:
  // A generator the capture drew from: its (seed, offset origin) pair in
  // device memory, and the draws the capture made from it.
  struct GeneratorUse {
    Generator* generator;
    Tensor state;  // two uint64 words, from the private pool
    uint64_t draws = 0;
  };

  void discard_capture();

  const int device_;
  const Stream stream_;  // the capture's: its blocks are the private pool
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<GeneratorUse> generators_;
  std::vector<void*> kept_;   // outside blocks released during the capture
  Stream last_replay_stream_;  // where the graph's work last went
};

}  // namespace loom::cuda
