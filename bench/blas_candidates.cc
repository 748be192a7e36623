// Would another CPU GEMM from Debian earn its place in loom? Times loom's
// own product (tensor/cpu/gemm.h: Eigen's GEMM, or loom's packed kernel on
// the shapes where that is faster) against the float32 GEMM of each
// candidate library installed, on the shapes loom's CPU benchmarks spend
// their time in, and prints one JSON line a shape and library.
//
//   bazel run -c opt //bench:blas_candidates -- [threads]
//
// Candidates are loaded at run time, so none is a build dependency; one
// that is not installed is named and skipped. Install them with
//   apt-get install libopenblas0-openmp libblis4-openmp libdnnl2
// All use OpenMP threads, set to `threads` (default: one per core).
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tensor/cpu/gemm.h"

namespace {

// C (m x n, row-major) = A (m x k, row-major) B, with B (k x n) row-major or
// given transposed as (n x k) row-major.
using Product = void (*)(void* fn, int64_t m, int64_t n, int64_t k, bool b_transposed, const float* a,
                         const float* b, float* c);

struct Library {
  std::string name;
  void* fn;  // the library's GEMM entry point
  Product product;
};

enum { kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112 };
using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);

void cblas_product(void* fn, int64_t m, int64_t n, int64_t k, bool bt, const float* a, const float* b, float* c) {
  reinterpret_cast<CblasSgemm>(fn)(kCblasRowMajor, kCblasNoTrans, bt ? kCblasTrans : kCblasNoTrans, m, n, k, 1.f, a,
                                   k, b, bt ? k : n, 0.f, c, n);
}

void dnnl_product(void* fn, int64_t m, int64_t n, int64_t k, bool bt, const float* a, const float* b, float* c) {
  reinterpret_cast<DnnlSgemm>(fn)('N', bt ? 'T' : 'N', m, n, k, 1.f, a, k, b, bt ? k : n, 0.f, c, n);
}

void loom_product(void*, int64_t m, int64_t n, int64_t k, bool bt, const float* a, const float* b, float* c) {
  loom::cpu::gemm<float>({a, k, true}, {b, bt ? k : n, !bt}, c, n, m, n, k);
}

std::vector<Library> load_libraries() {
  std::vector<Library> libraries{{"loom", nullptr, loom_product}};
  struct Candidate {
    const char *name, *path, *symbol;
    Product product;
  };
  const Candidate candidates[] = {
      {"openblas", "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0", "cblas_sgemm", cblas_product},
      {"blis", "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", "cblas_sgemm", cblas_product},
      {"onednn", "libdnnl.so.2", "dnnl_sgemm", dnnl_product},
  };
  for (const Candidate& c : candidates) {
    void* handle = dlopen(c.path, RTLD_NOW | RTLD_LOCAL);
    void* fn = handle != nullptr ? dlsym(handle, c.symbol) : nullptr;
    if (fn == nullptr) {
      std::fprintf(stderr, "blas_candidates: %s not installed (%s), skipped\n", c.name, c.path);
      continue;
    }
    libraries.push_back({c.name, fn, c.product});
  }
  return libraries;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  const char* where;
  int64_t m, n, k;
  bool b_transposed;  // a Linear layer's x W^T
};

// The median of five timings of enough calls for about a second of work.
double gflops(const Library& library, const Shape& s, const std::vector<float>& a, const std::vector<float>& b,
              std::vector<float>& c) {
  const double flops = 2.0 * s.m * s.n * s.k;
  const int calls = std::max(3, static_cast<int>(1e9 / flops));
  auto call = [&] { library.product(library.fn, s.m, s.n, s.k, s.b_transposed, a.data(), b.data(), c.data()); };
  call();
  std::vector<double> seconds;
  for (int round = 0; round < 5; ++round) {
    const double start = now_seconds();
    for (int i = 0; i < calls; ++i) call();
    seconds.push_back((now_seconds() - start) / calls);
  }
  std::sort(seconds.begin(), seconds.end());
  return flops / seconds[2] / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_num_procs();
  if (threads < 1) {
    std::fprintf(stderr, "usage: blas_candidates [threads >= 1]\n");
    return 2;
  }
  omp_set_num_threads(threads);
  const std::string count = std::to_string(threads);
  setenv("OPENBLAS_NUM_THREADS", count.c_str(), 1);  // read when the library loads
  setenv("BLIS_NUM_THREADS", count.c_str(), 1);
  const std::vector<Library> libraries = load_libraries();
  const Shape shapes[] = {
      {"square 1024", 1024, 1024, 1024, false},
      {"lstm h W_hh^T (a step's recurrence)", 64, 512, 128, true},
      {"lstm dgates W_hh (its backward)", 64, 128, 512, false},
      {"gpt_large qkv", 2048, 768, 256, true},
      {"gpt_large mlp down", 2048, 256, 1024, true},
      {"gpt (cpu shape) attention projection", 512, 128, 128, true},
  };
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
    for (const Library& library : libraries)
      std::printf("{\"shape\": \"%s\", \"m\": %ld, \"n\": %ld, \"k\": %ld, \"threads\": %d, \"library\": \"%s\", "
                  "\"gflops\": %.1f}\n",
                  s.where, static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.k), threads,
                  library.name.c_str(), gflops(library, s, a, b, c));
  }
  return 0;
}
