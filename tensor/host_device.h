// For the few headers that both the host compiler and nvcc compile (the
// random generator, the elementwise kernels' layout): LOOM_HOST_DEVICE
// makes a function callable on both sides, LOOM_UNROLL asks nvcc to unroll
// a loop (GCC would warn about the unknown pragma).
#pragma once

#if defined(__CUDACC__)
#define LOOM_HOST_DEVICE __host__ __device__ __forceinline__
#define LOOM_UNROLL _Pragma("unroll")
#else
#define LOOM_HOST_DEVICE inline
#define LOOM_UNROLL
#endif
