// How the GPU's convolutions choose their algorithm, as PyTorch's
// torch.backends.cudnn.benchmark.
//
// By default cuDNN's heuristics rank the algorithms for a shape and the first
// that runs is kept: no trial runs, nothing waits. With benchmark on, the
// first convolution of each shape times cuDNN's algorithms on the real
// operands (cudnnFind*AlgorithmEx, which waits for the device) and keeps the
// fastest; later calls of that shape reuse it. Worth it where shapes repeat:
// a training loop, a CUDA graph's warm-up (a shape first met inside a capture
// is an error then, since timing waits for the device).
//
//   set_cudnn_benchmark(true);   // once, at start-up
#pragma once

namespace loom {

void set_cudnn_benchmark(bool benchmark);
bool cudnn_benchmark();

}  // namespace loom
