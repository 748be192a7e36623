// Which cuBLAS interface the CUDA backend's matrix products go through, as
// PyTorch's torch.backends.cuda.preferred_blas_library().
//
//   kCublas    every product is one cublasGemmEx call; a Linear layer's bias
//              is added by a broadcast kernel after it (a read and a write
//              of the output);
//   kCublasLt  products with a bias row (addmm, so every Linear) go through
//              cublasLtMatmul, which adds the bias in its epilogue, while
//              the output is written. Where cuBLASLt has no algorithm for a
//              case (float64, say), the product falls back to kCublas's way.
//
// kCublasLt is the default: on the H200 it passed every test and took the
// gpt step from 35.2 to 33.6 ms in float32 and 11.3 to 9.6 under bf16
// autocast (docs/benchmarks.md, 2026-11-27). The CPU ignores the switch: its
// GEMM adds the bias itself. Reading it is cheap (an atomic load); a change affects later calls.
//
//   set_preferred_blas_library(BlasLibrary::kCublasLt);
#pragma once

namespace loom {

enum class BlasLibrary { kCublas, kCublasLt };

void set_preferred_blas_library(BlasLibrary library);
BlasLibrary preferred_blas_library();
const char* blas_library_name(BlasLibrary library);  // "cublas", "cublaslt"

}  // namespace loom
