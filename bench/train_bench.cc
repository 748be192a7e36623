// train_bench: times training steps of the benchmark models and prints one
// JSON line. bench/torch_reference.py runs the same workloads in PyTorch with
// the same output, and bench/compare_torch.sh prints the ratio.
//
//   bazel run //bench:train_bench -- --model cnn --device cpu --steps 20
//
// Shapes: bench/workloads.h (the same as torch_reference.py's).
// Inputs are random but fixed; each step is forward, backward, optimizer step.
// --precision bf16|fp16 runs the forward under autocast (tensor/autocast.h;
// fp16 with a GradScaler), as torch_reference.py does with torch.autocast;
// fp8 (gpt, gpt_large) is bf16 with the blocks' Linear layers in float8
// (nn/float8_training.h), as torch_reference.py with torchao's.
// float32 products and convolutions on the GPU are exact FP32 unless --tf32;
// torch_reference.py sets PyTorch's switches alike (its cuDNN default is TF32).
// --blas picks the library of the Linear layers' products (tensor/blas_library.h;
// by default cuBLASLt, which adds the bias in its epilogue); --attention picks
// the attention kernel, --attention-backward deterministic keeps its CUDA
// backward from adding dq with atomics (nn::functional::set_deterministic_attention).
// --cuda-graph captures the step once after the warm-up (a capturable AdamW,
// tensor/device_graph.h) and times its replays, as torch_reference.py
// --cuda-graph does for PyTorch.
// The timed steps lie between two device synchronisations, after --warmup
// untimed ones; the line names the GPU.
//
// Besides the speed, each line says how the timed steps used memory: calls
// the device's caching allocator made to the system ("system_allocs_per_step",
// 0 once it is warm) and calls to malloc from anywhere in the process
// ("malloc_calls_per_step": autograd nodes, shapes, Eigen's GEMM buffers),
// and how often the host waited for the GPU ("host_waits_per_step": 0 but
// for the GradScaler's finite check under fp16; always 0 on the CPU), and
// the most memory live tensors held during them ("peak_mb", the device
// allocator's high-water mark: activations saved for backward, gradients,
// optimizer state).
// "flops_per_step" is counted as one eager step runs (tensor/flop_counter.h,
// PyTorch's FlopCounterMode formulas); "tflops" is it over the timed steps'
// time and "mfu" that over the device's peak ("peak_tflops", "peak_source":
// a GPU's dense data-sheet rate, or the CPU's best 1024^3 float32 GEMM
// through loom's matmul, measured in the same run; parallel/planner/mfu.h).
// On the CPU (fp32) the line also has Eigen's fp32 GEMM rate (1024^3, the
// same threads) and the step's rate as a fraction of it, both medians of
// rounds that alternate a GEMM and a step.
#include <Eigen/Core>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <vector>

#include "bench/malloc_counter.h"
#include "bench/median.h"
#include "bench/workloads.h"
#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "nn/float8_training.h"
#include "nn/functional.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "parallel/planner/gpu_name.h"
#include "parallel/planner/mfu.h"
#include "tensor/autocast.h"
#include "tensor/backend.h"
#include "tensor/blas_library.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cudnn_benchmark.h"
#include "tensor/device_graph.h"
#include "tensor/host_waits.h"
#include "tensor/precision.h"
#include "tensor/stopwatch.h"

using namespace loom;
using namespace loom::examples;

namespace {

// The step's rate against the machine's GEMM rate, measured in alternation
// so that both see the same machine: a shared VM's speed drifts over seconds
// (here the 1024^3 GEMM rate ranged from 148 to 219 GFLOP/s in one hour),
// so rates taken a few seconds apart are not comparable. Medians of rounds
// of one fp32 1024^3 Eigen GEMM and one training step. The GEMM is the
// build loom's kernels use on this CPU (tensor/cpu/gemm.h: AVX-512 where
// the processor has it), so the fraction is of the rate loom can reach.
struct Efficiency {
  double step_gflops = 0, gemm_gflops = 0;
};

template <typename Step>
Efficiency measure_efficiency(double step_flops, Step train_step, int rounds = 15) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int n = 1024;
  Matrix a = Matrix::Random(n, n), b = Matrix::Random(n, n), c(n, n);
  auto product = [&] { cpu::gemm<float>({a.data(), n, true}, {b.data(), n, true}, c.data(), n, n, n, n); };
  product();  // warm
  std::vector<double> gemm, step;
  for (int r = 0; r < rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    product();
    gemm.push_back(2.0 * n * n * n / seconds_since(start) / 1e9);
    start = std::chrono::steady_clock::now();
    train_step();
    step.push_back(step_flops / seconds_since(start) / 1e9);
  }
  return {bench::median(step), bench::median(gemm)};
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("train_bench", [&] {
    Flags flags("Time training steps of loom's benchmark models");
    std::string model = "cnn", device_name = "cpu", precision = "fp32", attention = "auto",
                attention_backward = "atomic",
                blas = blas_library_name(preferred_blas_library());
    int steps = 20, warmup = 3, threads = 0;
    bool tf32 = false, cuda_graph = false, cudnn_bench = false;
    flags.add("--model", model, "cnn, gpt, gpt_large, lstm or mlp", Scope::Run, CLI::IsMember({"cnn", "gpt", "gpt_large", "lstm", "mlp"}));
    flags.add("--device", device_name, "cpu or cuda[:N]", Scope::Run, examples::device_name());
    flags.add("--steps", steps, "timed steps", Scope::Run, integer_in(1, 1000000));
    flags.add("--warmup", warmup, "untimed steps first", Scope::Run, integer_in(0, 1000000));
    flags.add("--precision", precision,
              "fp32, or bf16 / fp16: the forward under autocast (fp16 with a GradScaler); fp8 (gpt, gpt_large): "
              "bf16 with the blocks' Linear layers in float8; parameters stay fp32",
              Scope::Run, CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
    flags.add_switch("--tf32", tf32, "CUDA: TF32 for float32 matrix products and convolutions", Scope::Run);
    flags.add_switch("--cudnn-benchmark", cudnn_bench,
                     "CUDA: time cuDNN's convolution algorithms at a shape's first call and keep the fastest "
                     "(PyTorch's cudnn.benchmark, which torch_reference.py sets)",
                     Scope::Run);
    flags.add("--attention-backward", attention_backward,
              "atomic (the default: the fused CUDA backward adds dq with atomics in float32, float64) or deterministic", Scope::Run,
              CLI::IsMember({"deterministic", "atomic"}));
    flags.add("--attention", attention, "auto, fused or composite: the kernel of the attention layers (nn/functional.h)",
              Scope::Run, CLI::IsMember({"auto", "fused", "composite"}));
    flags.add("--blas", blas,
              "CUDA: cublas or cublaslt, the library of products with a bias (tensor/blas_library.h)", Scope::Run,
              CLI::IsMember({"cublas", "cublaslt"}));
    flags.add("--threads", threads, "CPU threads (0: OpenMP's default, one per core)", Scope::Run,
              integer_in(0, 1024));
    flags.add_switch("--cuda-graph", cuda_graph,
                     "CUDA: capture the step (forward, backward, AdamW) once after the warm-up and time its replays",
                     Scope::Run);
    flags.parse(argc, argv);
    const Device device = Device::parse(device_name);
    LOOM_CHECK(!cuda_graph || device.is_cuda(), "train_bench: --cuda-graph needs a CUDA device (--device cuda)");
    if (threads > 0) omp_set_num_threads(threads);
    tf32 = tf32 && device.is_cuda();  // the CPU computes float32 exactly either way
    set_allow_tf32(tf32);
    set_cudnn_benchmark(cudnn_bench);
    if (!device.is_cuda()) blas = "eigen";  // the CPU has its own GEMM either way
    set_preferred_blas_library(blas == "cublaslt" ? BlasLibrary::kCublasLt : BlasLibrary::kCublas);
    nn::functional::set_deterministic_attention(attention_backward == "deterministic");
    nn::functional::set_attention_kernel(attention == "fused"       ? nn::functional::AttentionKernel::kFused
                                         : attention == "composite" ? nn::functional::AttentionKernel::kComposite
                                                                    : nn::functional::AttentionKernel::kAuto);

    manual_seed(0);
    bench::Workload w = bench::make_workload(model, device);
    if (precision == "fp8") {  // not the head: torchtitan's float8 converter leaves the output layer
      LOOM_CHECK(model == "gpt" || model == "gpt_large", "--precision fp8 is for the gpt models, not ", model);
      nn::convert_to_float8_training(*w.model,
                                     [](const std::string& name, const nn::LinearImpl&) { return name != "head"; });
    }
    // PyTorch's AdamW defaults (weight decay 0.01), as torch_reference.py's.
    optim::AdamW opt(w.model->parameters(), {.lr = 1e-3, .weight_decay = 0.01, .capturable = cuda_graph});
    const std::optional<DType> autocast = autocast_dtype_for(precision);
    optim::GradScaler scaler({.enabled = precision == "fp16", .capturable = cuda_graph});
    auto train_step = [&] {
      Tensor loss;
      {
        AutocastGuard guard(autocast);
        loss = w.loss(w.model->forward(w.input), w.target);
      }
      opt.zero_grad();
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
      return loss;
    };
    // Warm-up keeps the last loss alive as the timed loop does, so that the
    // allocator has seen every block a timed step holds.
    Tensor loss;
    for (int i = 0; i < std::max(warmup, cuda_graph ? 1 : 0); ++i) loss = train_step();
    // The step's FLOPs, counted at the ops as they run (tensor/flop_counter.h):
    // one more eager step, before a graph is captured (replays pass no op).
    const int64_t flops_per_step = parallel::count_step_flops([&] { loss = train_step(); });
    std::function<Tensor()> timed_step = train_step;
    std::optional<DeviceGraph> graph;
    if (cuda_graph) {
      graph.emplace(device);
      graph->capture([&] { loss = train_step(); });
      timed_step = [&] {
        graph->replay();
        return loss;
      };
      timed_step();  // the first launch uploads the graph
    }
    synchronize(device);
    reset_peak_memory_stats(device);
    const int64_t system_allocs_before = memory_stats(device).system_allocations;
    const int64_t malloc_calls_before = bench::malloc_calls();
    const auto start = std::chrono::steady_clock::now();
    const int64_t host_waits_before = host_waits();
    for (int i = 0; i < steps; ++i) loss = timed_step();
    const double waits = double(host_waits() - host_waits_before) / steps;
    synchronize(device);
    const double seconds = seconds_since(start);
    const MemoryStats memory = memory_stats(device);
    const double system_allocs = double(memory.system_allocations - system_allocs_before) / steps;
    const double peak_mb = memory.peak_allocated_bytes / double(1 << 20);
    const double malloc_calls = double(bench::malloc_calls() - malloc_calls_before) / steps;
    const double final_loss = loss.item();  // after timing: reading it synchronises
    std::printf("{\"framework\": \"loom\", \"model\": \"%s\", \"device\": \"%s\", \"gpu\": \"%s\", "
                "\"precision\": \"%s\", \"tf32\": %s, \"attention\": \"%s\", \"attention_backward\": \"%s\", "
                "\"blas\": \"%s\", \"cuda_graph\": %s, \"cudnn_benchmark\": %s, \"steps\": %d, "
                "\"threads\": %d, \"ms_per_step\": %.3f, \"samples_per_s\": %.1f, \"tokens_per_s\": %.1f, "
                "\"loss\": %.6f, \"system_allocs_per_step\": %.1f, \"malloc_calls_per_step\": %.1f, "
                "\"host_waits_per_step\": %.1f, \"peak_mb\": %.1f, \"flops_per_step\": %.4g",
                model.c_str(), device.str().c_str(), parallel::gpu_name(device).c_str(), precision.c_str(),
                tf32 ? "true" : "false", attention.c_str(), attention_backward.c_str(), blas.c_str(),
                cuda_graph ? "true" : "false", cudnn_bench ? "true" : "false", steps,
                omp_get_max_threads(), 1000 * seconds / steps,
                w.samples_per_step * steps / seconds, w.tokens_per_step * steps / seconds, final_loss,
                system_allocs, malloc_calls, waits, peak_mb, double(flops_per_step));
    // Achieved FLOP/s and model FLOPs utilisation (parallel/planner/mfu.h): against the
    // data sheet's dense peak for the precision (TF32's where --tf32) where
    // the table knows the GPU; on the CPU against the GEMM rate measured now.
    const double achieved = double(flops_per_step) * steps / seconds;
    const parallel::Peak peak = parallel::device_peak(device, tf32 && precision == "fp32" ? "tf32" : precision);
    std::printf(", \"tflops\": %.4f, \"peak_tflops\": %.4f, \"peak_source\": \"%s\"", achieved / 1e12,
                peak.flops_per_s / 1e12, peak.source.c_str());
    if (peak.flops_per_s > 0 && flops_per_step > 0) std::printf(", \"mfu\": %.4f", achieved / peak.flops_per_s);
    if (device.is_cpu() && flops_per_step > 0 && precision == "fp32") {
      const Efficiency e = measure_efficiency(double(flops_per_step), train_step);
      std::printf(", \"step_gflop\": %.3f, \"step_gflops\": %.1f, \"gemm_gflops\": %.1f, "
                  "\"fraction_of_gemm\": %.3f",
                  flops_per_step / 1e9, e.step_gflops, e.gemm_gflops, e.step_gflops / e.gemm_gflops);
    }
    std::printf("}\n");
    return 0;
  });
}
