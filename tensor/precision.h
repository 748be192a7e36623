// Process-wide precision switches of the GPU kernels, as PyTorch's
// torch.backends.cuda.matmul.allow_tf32.
//
// float32 matrix products and convolutions on the GPU are exact FP32 by
// default. TF32 (the tensor cores' float32 mode: a 10-bit mantissa on the
// inputs, about 1e-3 relative error) is several times faster on Hopper; a
// program that can live with it asks for it once:
//
//   set_allow_tf32(true);   // cuBLAS and cuDNN may use TF32 for float32 from now on
//
// The CPU backend ignores the switch. Reading it is cheap (an atomic load), so
// kernels read it at every call; changing it affects calls made afterwards.
#pragma once

namespace loom {

void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace loom
