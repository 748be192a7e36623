// Stands in for cuda_bench.cc in builds without the CUDA backend.
#include <iostream>

int main() {
  std::cerr << "cuda_bench: loom was built without the CUDA backend (no CUDA toolkit, or "
               "--//:cuda=false): nothing to measure\n";
  return 1;
}
