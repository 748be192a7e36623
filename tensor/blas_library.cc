#include "tensor/blas_library.h"

#include <atomic>

namespace loom {
namespace {

// Process-wide, as the PyTorch setting it mirrors (docs/style.md, "State":
// global state only where it is the point).
std::atomic<BlasLibrary>& preferred() {
  static std::atomic<BlasLibrary> library{BlasLibrary::kCublasLt};
  return library;
}

}  // namespace

void set_preferred_blas_library(BlasLibrary library) { preferred().store(library, std::memory_order_relaxed); }
BlasLibrary preferred_blas_library() { return preferred().load(std::memory_order_relaxed); }

const char* blas_library_name(BlasLibrary library) {
  return library == BlasLibrary::kCublasLt ? "cublaslt" : "cublas";
}

}  // namespace loom
