// loom's CUDA kernels beside the hardware's and cuBLAS's own numbers, in one
// binary, on the same GPU:
//   - elementwise add of 2^28 floats vs a device-to-device cudaMemcpy of the
//     same size (GB/s counting bytes read + written; goal: >= 85% of the copy);
//   - softmax over rows of 4096 floats (goal: >= 70% of the copy's GB/s);
//   - sums of 2^28 floats: along rows of 4096, down columns of 4096 and over
//     everything (GB/s of the bytes read; goal: >= 80% of the copy's GB/s),
//     and CUB's sum over everything (cub::DeviceReduce) beside loom's;
//   - a 4096^3 float32 matmul through loom vs cuBLAS called directly
//     (TFLOP/s; goal: >= 95% of cuBLAS), exact FP32 and TF32;
//   - host-to-device copies from pinned and from pageable memory (GB/s).
// Each line of stdout is one JSON object (with the GPU's name); a short
// table follows on stderr. Runs on a GPU only:
//
//   .gpu/bin/cuda_bench > bench.jsonl        (tools/gpu_run.sh run does this)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cub_reference.h"
#include "examples/common/program.h"
#include "tensor/backend.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"
#include "tensor/ops.h"
#include "tensor/precision.h"

namespace {

using namespace loom;

#define BENCH_CHECK(call)                                                                     \
  do {                                                                                        \
    auto status = (call);                                                                     \
    if (static_cast<int>(status) != 0) {                                                      \
      std::fprintf(stderr, "cuda_bench: %s failed with status %d\n", #call, static_cast<int>(status)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

const Device kGpu = Device::cuda(0);

// Median milliseconds of `run` over `reps` timed runs after `warmup` untimed
// ones, each timed with events on the current stream.
double median_ms(const std::function<void()>& run, int warmup = 3, int reps = 15) {
  for (int i = 0; i < warmup; ++i) run();
  synchronize(kGpu);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    cuda::Event start(true), stop(true);
    start.record(cuda::current_stream(0));
    run();
    stop.record(cuda::current_stream(0));
    stop.synchronize();
    times.push_back(start.elapsed_time(stop));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Result {
  std::string bench, unit;
  double value = 0, reference = 0, goal = 0;  // goal: minimum value / reference (0: none)
  std::string reference_name, extra;
};

std::string gpu_name;
std::vector<Result> results;

void report(const Result& r) {
  std::ostringstream line;
  line << "{\"bench\":\"" << r.bench << "\",\"gpu\":\"" << gpu_name << "\",\"" << r.unit << "\":" << r.value;
  if (!r.reference_name.empty()) {
    const double ratio = r.value / r.reference;
    line << ",\"reference\":\"" << r.reference_name << "\",\"reference_" << r.unit << "\":" << r.reference
         << ",\"ratio\":" << ratio;
    if (r.goal > 0) line << ",\"goal\":" << r.goal << ",\"met\":" << (ratio >= r.goal ? "true" : "false");
  }
  if (!r.extra.empty()) line << "," << r.extra;
  line << "}";
  std::cout << line.str() << std::endl;
  results.push_back(r);
}

// Max |a - b| / max(1, |b|) over the first n elements of two tensors.
double max_difference(const Tensor& a, const Tensor& b, int64_t n) {
  std::vector<double> x = a.flatten().narrow(0, 0, n).to_vector<double>();
  std::vector<double> y = b.flatten().narrow(0, 0, n).to_vector<double>();
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(1.0, std::abs(y[i])));
  return worst;
}

std::string check_field(double error, double tolerance) {
  std::ostringstream out;
  out << "\"check_max_rel_error\":" << error << ",\"check_ok\":" << (error <= tolerance ? "true" : "false");
  return out.str();
}

double bench_copy_and_add() {
  const int64_t n = int64_t{1} << 28;
  const double bytes = static_cast<double>(n) * sizeof(float);
  Generator g(1);
  Tensor a = randn({n}, {.device = kGpu}, &g), b = randn({n}, {.device = kGpu}, &g);
  Tensor copy = full({n}, -1, {.device = kGpu});
  cudaStream_t stream = cuda::current_stream(0).handle();
  const double copy_ms = median_ms([&] {
    BENCH_CHECK(cudaMemcpyAsync(copy.raw_data(), a.raw_data(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  });
  const double copy_gbps = 2 * bytes / copy_ms / 1e6;
  report({"d2d_memcpy", "GBps", copy_gbps, 0, 0, "", "\"n\":" + std::to_string(n)});

  Tensor c;
  const double add_ms = median_ms([&] { c = a + b; });
  const int64_t check = 1 << 20;
  const double error = max_difference(c, a.narrow(0, 0, check).cpu() + b.narrow(0, 0, check).cpu(), check);
  report({"add", "GBps", 3 * bytes / add_ms / 1e6, copy_gbps, 0.85, "d2d_memcpy",
          "\"n\":" + std::to_string(n) + ",\"ms\":" + std::to_string(add_ms) + "," + check_field(error, 1e-6)});
  return copy_gbps;
}

void bench_softmax(double copy_gbps) {
  const int64_t rows = 1 << 16, cols = 4096;
  const double bytes = static_cast<double>(rows * cols) * sizeof(float);
  Generator g(2);
  Tensor x = randn({rows, cols}, {.device = kGpu}, &g) * 3.0;
  Tensor y;
  const double ms = median_ms([&] { y = softmax(x, 1); });
  Tensor head = x.narrow(0, 0, 64).cpu();
  const double error = max_difference(y.narrow(0, 0, 64), softmax(head, 1), 64 * cols);
  report({"softmax_rows_4096", "GBps", 2 * bytes / ms / 1e6, copy_gbps, 0.70, "d2d_memcpy",
          "\"rows\":" + std::to_string(rows) + ",\"ms\":" + std::to_string(ms) + "," + check_field(error, 1e-5)});
}

// A reduction reads each byte once and writes next to nothing: its GB/s
// (bytes read) against the copy's (bytes read + written), the traffic the
// memory sustains.
void bench_sums(double copy_gbps) {
  const int64_t rows = 1 << 16, cols = 4096;
  const double bytes = static_cast<double>(rows * cols) * sizeof(float);
  Generator g(4);
  Tensor x = randn({rows, cols}, {.device = kGpu}, &g), columns = x.view({cols, rows});
  struct Case {
    const char* name;
    std::function<Tensor()> run;
    std::function<double(const Tensor&)> error;  // against the CPU on a slice
  };
  const int64_t check = 64;
  const Case cases[] = {
      {"sum_rows_4096", [&] { return sum(x, {1}); },
       [&](const Tensor& y) { return max_difference(y, sum(x.narrow(0, 0, check).cpu(), {1}), check); }},
      {"sum_cols_4096", [&] { return sum(columns, {0}); },
       [&](const Tensor& y) {
         return max_difference(y, sum(columns.narrow(1, 0, check).contiguous().cpu(), {0}), check);
       }},
      {"sum_all", [&] { return sum(x); },
       [&](const Tensor& y) {  // the error relative to the sum of magnitudes
         const Tensor exact = x.cpu().to(kFloat64);
         return std::abs(y.item() - sum(exact).item()) / sum(abs(exact)).item();
       }},
  };
  double loom_all_ms = 0;
  for (const Case& c : cases) {
    Tensor y;
    const double ms = median_ms([&] { y = c.run(); });
    if (std::string(c.name) == "sum_all") loom_all_ms = ms;
    report({c.name, "GBps", bytes / ms / 1e6, copy_gbps, 0.80, "d2d_memcpy",
            "\"ms\":" + std::to_string(ms) + "," + check_field(c.error(y), 1e-4)});
  }
  // CUB's sum over everything: what NVIDIA's own reduction reaches on this
  // GPU, against the copy and as the reference for loom's.
  const int64_t n = rows * cols;
  const size_t scratch_bytes = bench::cub_sum_scratch_bytes(n);
  Tensor scratch = empty({static_cast<int64_t>(scratch_bytes) + 1}, {.dtype = kUInt8, .device = kGpu});
  Tensor cub_out = empty({1}, {.device = kGpu});
  cudaStream_t stream = cuda::current_stream(0).handle();
  const double cub_ms = median_ms([&] {
    BENCH_CHECK(bench::cub_sum(static_cast<const float*>(x.raw_data()), static_cast<float*>(cub_out.raw_data()), n,
                               scratch.raw_data(), scratch_bytes, stream));
  });
  const double agreement = std::abs(cub_out.item() - sum(x).item()) / sum(abs(x)).item();
  report({"sum_all_cub", "GBps", bytes / cub_ms / 1e6, copy_gbps, 0, "d2d_memcpy",
          "\"ms\":" + std::to_string(cub_ms) + ",\"loom_over_cub\":" + std::to_string(cub_ms / loom_all_ms) + "," +
              check_field(agreement, 1e-5)});
}

void bench_matmul() {
  const int n = 4096;
  const double flops = 2.0 * n * n * n;
  Generator g(3);
  Tensor a = randn({n, n}, {.device = kGpu}, &g), b = randn({n, n}, {.device = kGpu}, &g);
  Tensor direct = full({n, n}, -1, {.device = kGpu});

  // The reference handle is set up as loom's (tensor/cuda/handles.cc and
  // matmul.cc): the same math mode and a workspace of the same 32 MiB,
  // cuBLAS's recommendation for Hopper.
  cublasHandle_t handle = nullptr;
  BENCH_CHECK(cublasCreate(&handle));
  BENCH_CHECK(cublasSetStream(handle, cuda::current_stream(0).handle()));
  BENCH_CHECK(cublasSetMathMode(
      handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  const int64_t workspace_bytes = 32 << 20;
  Tensor workspace = empty({workspace_bytes}, {.dtype = kUInt8, .device = kGpu});
  BENCH_CHECK(cublasSetWorkspace(handle, workspace.raw_data(), workspace_bytes));
  const float one = 1, zero = 0;
  // Row-major C = A B is column-major C^T = B^T A^T: pass B first.
  auto cublas_run = [&](cublasComputeType_t compute) {
    BENCH_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b.raw_data(), CUDA_R_32F, n,
                             a.raw_data(), CUDA_R_32F, n, &zero, direct.raw_data(), CUDA_R_32F, n, compute,
                             CUBLAS_GEMM_DEFAULT));
  };

  for (bool tf32 : {false, true}) {
    const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const double cublas_ms = median_ms([&] { cublas_run(compute); });
    set_allow_tf32(tf32);
    Tensor c;
    const double loom_ms = median_ms([&] { c = mm(a, b); });
    set_allow_tf32(false);
    const double error = max_difference(c, direct, int64_t{1} << 20);
    const std::string name = tf32 ? "matmul_4096_tf32" : "matmul_4096_fp32";
    report({name, "TFLOPs", flops / loom_ms / 1e9, flops / cublas_ms / 1e9, 0.95, "cublas_direct",
            "\"loom_ms\":" + std::to_string(loom_ms) + ",\"cublas_ms\":" + std::to_string(cublas_ms) + "," +
                check_field(error, tf32 ? 1e-2 : 1e-5)});
  }
  cublasDestroy(handle);
}

void bench_host_to_device() {
  const int64_t n = int64_t{1} << 26;  // 256 MiB
  const double bytes = static_cast<double>(n) * sizeof(float);
  Tensor pageable = ones({n}), pinned = empty_pinned({n});
  pinned.fill_(1);
  Tensor on_gpu;
  const double pinned_ms = median_ms([&] { on_gpu = pinned.to(kGpu); }, 2, 7);
  const double pageable_ms = median_ms([&] { on_gpu = pageable.to(kGpu); }, 2, 7);
  report({"h2d_pinned", "GBps", bytes / pinned_ms / 1e6, bytes / pageable_ms / 1e6, 0, "h2d_pageable",
          "\"bytes\":" + std::to_string(static_cast<int64_t>(bytes))});
}

}  // namespace

int main() {
  return examples::run_program("cuda_bench", [] {
    if (!cuda_available()) {
      std::cerr << "cuda_bench: no usable CUDA device here (or loom was built without CUDA): "
                   "nothing to measure. Run it on the GPU machine (tools/gpu_run.sh run).\n";
      return 1;
    }
    cudaDeviceProp props{};
    BENCH_CHECK(cudaGetDeviceProperties(&props, 0));
    gpu_name = props.name;
    const double copy_gbps = bench_copy_and_add();
    bench_softmax(copy_gbps);
    bench_sums(copy_gbps);
    bench_matmul();
    bench_host_to_device();
    std::fprintf(stderr, "\n%-20s %12s %12s %8s %6s  (%s)\n", "bench", "loom", "reference", "ratio", "goal",
                 gpu_name.c_str());
    for (const Result& r : results) {
      if (r.reference_name.empty()) {
        std::fprintf(stderr, "%-20s %9.1f %s\n", r.bench.c_str(), r.value, r.unit.c_str());
        continue;
      }
      const double ratio = r.value / r.reference;
      std::fprintf(stderr, "%-20s %9.1f %-6s %9.1f %8.3f %6s\n", r.bench.c_str(), r.value, r.unit.c_str(),
                   r.reference, ratio, r.goal > 0 ? (ratio >= r.goal ? "met" : "MISSED") : "-");
    }
    return 0;
  });
}
