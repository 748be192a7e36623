// compare_parallel: one model, one batch, every way loom can train it on N
// devices: single device, DataParallel, DistributedDataParallel (also with
// its gradients sent in bfloat16 or float16: ddp_bf16, ddp_fp16), ZeRO-1,
// ZeRO-2 and FSDP (N ranks as threads, or the processes under mpirun), layer
// split, the GPipe and 1F1B pipelines (stages as threads, or one per process
// under mpirun), tensor parallel (tp, and tp-sp with sequence parallelism),
// context parallel (cp, cp-zigzag: each rank on 1/N of every sequence;
// cp-ring, cp-ring-zigzag: with ring attention; cp-ulysses, cp-ulysses-zigzag:
// with Ulysses' all-to-alls),
// and with --mesh DxN the hybrids: D data-parallel pipelines of N stages
// (hybrid), or D data-parallel replicas in tensor parallel over N ranks
// (hybrid-tp, --model gpt), or tensor parallel over N ranks on 1/D of
// every sequence (cp-tp, --model gpt). For each it prints throughput, speed-up and scaling efficiency
// against the single device, the step split into compute / exposed
// communication / idle, peak memory, the per-rank state the ZeRO accounting
// predicts, bytes moved per step, and what an alpha-beta model predicts for N
// independent devices (parallel/planner/step_time.h). It writes a Chrome trace
// per strategy, a CSV and a PNG chart.
//
//   bazel run //bench:compare_parallel -- --model cnn --devices 2
//   bazel run //bench:compare_parallel -- --model mlp --mlp-hidden 2048 --mlp-layers 8 --devices 4 --link nvlink
//   bazel run //bench:compare_parallel -- --device cuda:0 --devices 2     # one GPU, repeated
//   mpirun -np 2 bazel-bin/bench/compare_parallel --model mlp          # ddp, zero, fsdp, pipelines over ranks
//   bazel run //bench:compare_parallel -- --model mlp --devices 4 --mesh 2x2   # adds the hybrid row
//   bazel run //bench:compare_parallel -- --model gpt --mesh 2x2 --strategies single,tp,hybrid-tp
//
// docs/compare.md walks through a run.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "bench/compare/measuring.h"
#include "bench/compare/strategies.h"
#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "examples/common/ranks.h"
#include "parallel/comm/init.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/planner/mfu.h"
#include "tensor/allocator.h"
#include "tensor/file_io.h"

using namespace loom;
using namespace loom::bench;
using namespace loom::examples;

namespace {

// --devices: a count, or a comma-separated list of devices (examples/common/flags.h
// parses the list for dp_fashion_mnist's --devices too).
constexpr int kMaxDevices = 64;  // bounds the count and the list alike
bool is_count(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}
std::vector<Device> device_list(const std::string& text) {
  return is_count(text) ? std::vector<Device>{} : parse_device_list(text, kMaxDevices);
}

CLI::Validator device_count_or_list() {
  const std::string what =
      "a count from 1 to " + std::to_string(kMaxDevices) + ", or a comma-separated list of devices";
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        if (is_count(text))
          return text.size() <= 2 && std::stoi(text) >= 1 && std::stoi(text) <= kMaxDevices
                     ? ""
                     : "expected " + what + ", got '" + text + "'";
        try {
          device_list(text);
          return "";
        } catch (const Error& e) {  // the list's own fault: which device, and why
          return "expected " + what + ", got '" + text + "': " + e.what();
        }
      },
      what);
}

void write_csv(const std::string& path, const std::vector<Measurement>& results, const std::vector<double>& projected,
               int64_t batch) {
  std::ostringstream out;
  out << "strategy,samples_per_s,compute_ms,comm_ms,idle_ms,projected_ms\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const Measurement& m = results[i];
    if (!m.skipped.empty()) continue;
    out << m.strategy << "," << batch / m.step_s << "," << 1e3 * m.compute_s << "," << 1e3 * m.comm_s << ","
        << 1e3 * m.idle_s << ",";
    if (projected[i] >= 0) out << 1e3 * projected[i];  // empty: not modelled
    out << "\n";
  }
  write_file_atomically(path, out.str());
}

// Left: samples/s per strategy. Right: the step split into compute,
// exposed communication and idle (stacked), with the projection as points.
// Returns why there is no chart, or "" when there is one.
std::string plot(const std::string& csv, const std::string& png, const std::string& title) {
  // Only a shell that ran and did not find it means gnuplot is missing.
  const int found = std::system("command -v gnuplot > /dev/null 2>&1");
  if (found == -1) return "could not start a shell to look for gnuplot";
  if (found != 0) return "gnuplot is missing (apt-get install gnuplot-nox)";
  const std::string script = png + ".gp";
  // gnuplot draws into a temporary made for it, never through a link
  // planted at the PNG's name; the rename then replaces the name itself.
  AtomicFile chart(png);
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1200,480 font ',10'\nset output '" << chart.temporary_path() << "'\n"
     << "set termoption noenhanced\nset datafile separator ','\nset multiplot layout 1,2 title '" << title << "'\n"
     << "set style data histograms\nset style fill solid 0.8 border -1\nset boxwidth 0.7\n"
     << "set xtics rotate by -30\nset grid ytics\nset key top left\n"
     << "set title 'throughput'\nset ylabel 'samples/s'\nset yrange [0:*]\n"
     << "plot '" << csv << "' using 2:xtic(1) title 'samples/s' lc rgb '#4477aa'\n"
     << "set title 'step time'\nset ylabel 'ms per step'\nset style histogram rowstacked\n"
     << "plot '" << csv << "' using 3:xtic(1) title 'compute' lc rgb '#228833', "
     << "'' using 4 title 'communication (exposed)' lc rgb '#ee6677', "
     << "'' using 5 title 'idle' lc rgb '#bbbbbb', "
     << "'' using 0:6 with points pt 7 ps 1.5 lc rgb 'black' title 'projected (N devices)'\n"
     << "unset multiplot\n";
  write_file_atomically(script, gp.str());
  if (std::system(("gnuplot '" + script + "'").c_str()) != 0) return "gnuplot failed on " + script;
  chart.commit();
  return "";
}

// --mesh DxN: D data-parallel pipelines of N >= 2 stages (hybrid), or D
// replicas in tensor parallel over N ranks (hybrid-tp).
std::pair<int, int> parse_mesh(const std::string& text) {
  const size_t x = text.find('x');
  if (x == std::string::npos || x == 0 || x + 1 == text.size() ||
      text.find_first_not_of("0123456789x") != std::string::npos || text.find('x', x + 1) != std::string::npos)
    return {0, 0};
  const int data = std::stoi(text.substr(0, x)), stages = std::stoi(text.substr(x + 1));
  return data >= 1 && data <= 64 && stages >= 2 && stages <= 64 ? std::pair{data, stages} : std::pair{0, 0};
}

CLI::Validator mesh_shape() {
  const std::string what = "DxN: D data-parallel replicas (1-64) of N stages or tensor ranks (2-64), such as 2x2";
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        try {
          if (text.size() <= 5 && parse_mesh(text).first > 0) return "";
        } catch (const std::exception&) {
        }
        return "expected " + what + ", got '" + text + "'";
      },
      what);
}

// Rank 0 plans the stages (it alone times the layers); every rank needs the cuts.

// --stage-boundaries: one cut between each two of the `stages`, rising, each
// inside the model's children (split_sequential's rule, which it checks).
// Every rank checks, before any of them works.
void check_stage_boundaries(const std::vector<int>& cuts, int stages, const Workload& w) {
  std::string text;
  for (int cut : cuts) text += (text.empty() ? "" : ",") + std::to_string(cut);
  const std::string flag = "--stage-boundaries " + text;
  const auto seq = as_sequential(w.model);
  if (!seq) throw UsageError(flag + ": the model is not a Sequential, so no pipeline cuts it");
  const int children = static_cast<int>(seq->size());
  if (static_cast<int>(cuts.size()) != stages - 1)
    throw UsageError(flag + ": " + std::to_string(stages) + " stages need " + std::to_string(stages - 1) +
                     (stages == 2 ? " cut" : " cuts") + ", got " + std::to_string(cuts.size()));
  try {
    parallel::split_sequential(nn::Sequential(seq), cuts);
  } catch (const Error&) {
    throw UsageError(flag + ": each cut must be a child's index from 1 to " + std::to_string(children - 1) +
                     ", rising (the model has " + std::to_string(children) + " children)");
  }
}
}  // namespace

int main(int argc, char** argv) {
  // A rank that fails (a bad flag included) ends the whole job at once: the
  // other ranks may be waiting for it.
  return run_program(
      "compare_parallel",
      [&] {
        std::shared_ptr<parallel::ProcessGroup> world = parallel::init(argc, argv);  // the MPI ranks, else one
        const bool writer = world->rank() == 0;  // rank 0 prints and writes the results
        Flags flags("Compare single-device, DataParallel, DDP, ZeRO, FSDP, layer-split, pipeline and hybrid training");
        std::string model = "cnn", device_name = "cpu";
        std::string strategies = "single,dp,ddp,zero1,zero2,fsdp,layer_split,gpipe,1f1b,interleaved,zb-h1,zb-h2,zb-v,tp,tp-sp,cp,cp-zigzag,cp-ring,cp-ring-zigzag,cp-ulysses,cp-ulysses-zigzag";
        bool checkpoint = false, timelines = false;
        std::string mesh_text;
        std::string link_name = "pcie", out = "compare_parallel";
        CompareConfig config;
        MlpShape mlp;
        double bandwidth_gbs = 0, latency_us = -1;
        flags.add("--model", model, "cnn or gpt (bench/train_bench's), lstm, or mlp", Scope::Job,
                  CLI::IsMember({"cnn", "gpt", "lstm", "mlp"}));
        flags.add("--mlp-hidden", mlp.hidden, "mlp: width", Scope::Job, integer_in<int64_t>(1, 1 << 16));
        flags.add("--mlp-layers", mlp.layers, "mlp: Linear layers", Scope::Job, integer_in(2, 1024));
        flags.add("--mlp-batch", mlp.batch, "mlp: samples per step", Scope::Job, integer_in<int64_t>(1, 1 << 20));
        GptShape gpt_shape;
        flags.add("--gpt-context", gpt_shape.context,
                  "gpt: sequence length (0: the device's default, 64 on a CPU); longer sequences are where sequence "
                  "and context parallelism pay",
                  Scope::Job, integer_in<int64_t>(0, 1 << 20));
        flags.add("--gpt-batch", gpt_shape.batch, "gpt: sequences per step (0: the device's default, 8 on a CPU)",
                  Scope::Job, integer_in<int64_t>(0, 1 << 20));
        flags.add("--device", device_name, "cpu, cuda:N, or cuda (under mpirun: each rank its local GPU); in one process the N 'devices' all are this one",
                  Scope::Job, examples::device_name());
        std::string devices_text = "2";
        CLI::Option* devices_flag = flags.add(
            "--devices", devices_text,
            "replicas, ranks or pipeline stages: a count (of --device), or a list such as cuda:0,cuda:1 for the "
            "single-process strategies (under mpirun: the ranks)",
            Scope::Job, device_count_or_list());
        std::string boundaries_text;
        flags.add("--stage-boundaries", boundaries_text,
                  "pipelines of --devices stages: the children each stage after the first begins at, comma-separated "
                  "(default: where the children's measured times balance); bench/plan takes the same",
                  Scope::Job, index_list());
        flags.add("--micro-batches", config.micro_batches, "pipeline micro-batches per step", Scope::Job,
                  integer_in(1, 1 << 16));
        flags.add("--steps", config.steps, "timed steps per strategy", Scope::Job, integer_in(1, 1000000));
        flags.add("--warmup", config.warmup, "untimed steps first", Scope::Job, integer_in(0, 1000000));
        CLI::Option* strategies_flag =
            flags.add("--strategies", strategies, "comma-separated subset to run (hybrid, hybrid-tp and cp-tp need --mesh)", Scope::Job,
                      list_of({"single", "dp", "ddp", "ddp_bf16", "ddp_fp16", "zero1", "zero2", "fsdp", "layer_split", "gpipe", "1f1b",
                               "interleaved", "zb-h1", "zb-h2", "zb-v", "hybrid", "tp", "tp-sp", "hybrid-tp", "cp", "cp-zigzag", "cp-ring", "cp-ring-zigzag", "cp-ulysses", "cp-ulysses-zigzag", "cp-tp", "single_ckpt", "ddp_ckpt", "zero1_ckpt", "zero2_ckpt", "fsdp_ckpt"}));
        flags.add_switch("--timelines", timelines,
                         "after the table, draw each pipeline's last step: its stages' passes where they ran, "
                         "idle time as dots",
                         Scope::Job);
        flags.add_switch("--checkpoint", checkpoint,
                  "also run single, ddp, zero1, zero2 and fsdp with activation checkpointing (rows <name>_ckpt)",
                  Scope::Job);
        flags.add("--mesh", mesh_text,
                  "the hybrids: DxN, D data-parallel pipelines of N stages (hybrid), or D replicas in tensor "
                  "parallel over N ranks (hybrid-tp, --model gpt), or N tensor-parallel ranks on 1/D of every "
                  "sequence (cp-tp, --model gpt, asked for by --strategies); D x N ranks: threads, or mpirun -np D*N; "
                  "adds the hybrid row (hybrid-tp for --model gpt)",
                  Scope::Job, mesh_shape());
        flags.add("--link", link_name, "projection: pcie or nvlink", Scope::Job,
                  CLI::Validator(
                      [](std::string& text) -> std::string {
                        return text == "pcie" || text == "nvlink" ? "" : "expected pcie or nvlink, got '" + text + "'";
                      },
                      "pcie or nvlink"));
        flags.add("--bandwidth-gbs", bandwidth_gbs, "projection: link bandwidth in GB/s (overrides --link)",
                  Scope::Job, number_in(1e-6, 1e6));
        flags.add("--latency-us", latency_us, "projection: link latency in microseconds (overrides --link)",
                  Scope::Job, number_in(0, 1e9));
        flags.add("--out", out, "prefix of the CSV, PNG and traces folder", Scope::Rank,
                  CLI::Validator([](std::string& text) { return text.empty() ? "expected a path prefix" : ""; },
                                 "a path prefix"));
        flags.parse(argc, argv);
        if (checkpoint) {
          std::string with;
          std::stringstream chosen(strategies);
          for (std::string name; std::getline(chosen, name, ',');) {
            with += (with.empty() ? "" : ",") + name;
            if (name == "single" || name == "ddp" || name == "zero1" || name == "zero2" || name == "fsdp")
              with += "," + name + "_ckpt";
          }
          strategies = with;
        }
        if (!mesh_text.empty()) {
          std::tie(config.mesh_data, config.mesh_pipeline) = parse_mesh(mesh_text);
          if (strategies_flag->count() == 0) strategies += model == "gpt" ? ",hybrid-tp" : ",hybrid";
        }
        config.device_list = device_list(devices_text);
        config.devices = config.device_list.empty() ? std::stoi(devices_text) : static_cast<int>(config.device_list.size());
        if (world->size() > 1) {
          if (devices_flag->count() != 0 && config.devices != world->size())
            throw UsageError("--devices " + std::to_string(config.devices) + " under mpirun -np " +
                             std::to_string(world->size()) + ": leave it out, the ranks are the devices");
          config.devices = world->size();
        }
        // The ranks agree on their settings, pick their devices ("cuda": each its local GPU) and the
        // group that moves them: NCCL when each rank has its own GPU, host staging when they share one.
        if (!config.device_list.empty() && world->size() != 1)
          throw UsageError("--devices " + devices_text +
                           ": a list is for one process; under mpirun each rank has its --device");
        const Rank me = join_job(world, flags, config.device_list.empty() ? device_name : config.device_list[0].str());
        config.device = me.device;
        if (world->size() > 1) config.group = me.group;
        parallel::ProjectionSettings projection{.devices = config.devices, .micro_batches = config.micro_batches};
        projection.link = link_name == "nvlink" ? parallel::Link::nvlink() : parallel::Link::pcie();
        if (bandwidth_gbs > 0) projection.link.bandwidth_bytes_per_s = bandwidth_gbs * 1e9;
        if (latency_us >= 0) projection.link.latency_s = latency_us * 1e-6;
        // Outputs are checked before the work: the CSV and chart (rank 0), the traces (every rank).
        if (writer) AtomicFile::check_writable(out + ".csv", "--out");
        config.trace_dir = out + "_traces";
        std::error_code error;
        std::filesystem::create_directory(config.trace_dir, error);
        LOOM_CHECK(!error && std::filesystem::is_directory(config.trace_dir), "--out: cannot create the folder ",
                   config.trace_dir, error ? " (" + error.message() + ")" : std::string(" (something else is there)"));

        manual_seed(0);
        Workload w = make_workload(model, config.device, mlp, gpt_shape);
        // The model's FLOPs a step, forward and backward of the whole batch,
        // counted once as they run (tensor/flop_counter.h): the work every
        // strategy shares out over its devices (model FLOPs: a _ckpt row's
        // recomputation is not counted, as MFU's definition asks). The random
        // stream is put back so that the strategies see what they saw before.
        const GeneratorState random_state = default_generator().state();
        const int64_t model_flops =
            parallel::count_step_flops([&] { w.loss(w.model->forward(w.input), w.target).backward(); });
        w.model->zero_grad();
        default_generator().set_state(random_state);
        auto wants = [&](const char* name) {
          return ("," + strategies + ",").find("," + std::string(name) + ",") != std::string::npos;
        };
        bool pipelines = false;
        std::stringstream names(strategies);
        for (std::string name; std::getline(names, name, ',');) pipelines |= parallel::is_pipeline(name);
        if (pipelines && config.micro_batches > w.input.size(0))
          throw UsageError("--micro-batches " + std::to_string(config.micro_batches) + ": more than the " +
                           std::to_string(w.input.size(0)) + " samples of a " + model + " step (see --help)");
        const std::vector<int> cuts = parse_index_list(boundaries_text);
        if (!cuts.empty()) check_stage_boundaries(cuts, config.devices, w);
        StagePlan plan;
        if (writer) plan = plan_stages(w, config.devices, cuts);
        if (config.group) {
          parallel::share_boundaries(plan.boundaries, *config.group, config.device);
          parallel::share_part_times(plan.part_times, *config.group, config.device);
        }
        config.chunk_plans[1] = plan;
        StagePlan mesh_plan;  // hybrid: the P stages of the mesh's pipelines
        if (config.mesh_pipeline > 0) {
          if (writer) mesh_plan = plan_stages(w, config.mesh_pipeline);
          if (config.group) parallel::share_boundaries(mesh_plan.boundaries, *config.group, config.device);
          config.mesh_boundaries = mesh_plan.boundaries;
        }
        for (const char* chunked : {"interleaved", "zb-v"}) {  // several parts a stage
          const int chunks = parallel::chunks_of(chunked);
          if (!wants(chunked) || config.chunk_plans.count(chunks)) continue;
          StagePlan parts;
          if (writer) parts = plan_stages(w, chunks * config.devices);
          if (config.group) {
            parallel::share_boundaries(parts.boundaries, *config.group, config.device);
            parallel::share_part_times(parts.part_times, *config.group, config.device);
          }
          config.chunk_plans[chunks] = parts;
        }
        const parallel::Profile& profile = plan.profile;
        const int64_t batch = w.samples_per_step;

        const unsigned cores = std::thread::hardware_concurrency();
        if (writer)
          std::printf("model %s, batch %lld, %lld parameters (%.1f MB); %d devices = %s; %d micro-batches\n",
                      model.c_str(), static_cast<long long>(batch), static_cast<long long>(w.model->num_parameters()),
                      profile.parameter_bytes / 1e6, config.devices,
                      config.device_list.empty() ? (config.device.str() + " repeated").c_str() : devices_text.c_str(),
                      config.micro_batches);
        if (writer && !plan.boundaries.empty()) {
          // Where the pipelines are cut: bench/plan --stage-boundaries plans the same stages.
          std::string at;
          for (int b : plan.boundaries) at += (at.empty() ? "" : ",") + std::to_string(b);
          std::printf("pipeline stages begin at children %s (%s)\n", at.c_str(),
                      cuts.empty() ? "balanced by their measured times" : "as --stage-boundaries asked");
        }
        if (writer && config.group)
          std::printf("NOTE: under mpirun each of the %d ranks is one device with its share of the %u cores (OpenMP "
                      "threads: cores / ranks); single runs on rank 0 alone with that share; dp and layer_split, which "
                      "drive all devices from one process, are skipped.\n",
                      config.devices, cores);
        // Whether the N devices are really one: a repeated device, or ranks that share a GPU (host staging).
        const std::set<Device> distinct(config.device_list.begin(), config.device_list.end());
        const bool shared = config.group ? config.group->backend().find("nccl") == std::string::npos
                                         : distinct.size() < static_cast<size_t>(config.devices);
        if (writer && config.devices > 1 && shared) {
          if (config.device.is_cuda())
            std::printf("NOTE: the %d devices are one GPU: replicas, ranks and stages share it, so a speed-up here "
                        "is not a multi-GPU speed-up, and the ranks' collectives go through host memory (host "
                        "staging: NCCL takes one GPU per rank), so their communication costs what a round trip "
                        "over PCIe does. The 'projected' column is the model's estimate for %d separate GPUs.\n",
                        config.devices, config.devices);
          else
            std::printf("NOTE: the %d devices are one CPU with %u cores, shared by every replica, rank and stage: a "
                        "speed-up here means a strategy keeps those cores busier, not that %d devices were used.%s The "
                        "'projected' column is the model's estimate for %d separate devices.\n",
                        config.devices, cores, config.devices,
                        static_cast<unsigned>(config.devices) > cores ? " There are more devices than cores." : "",
                        config.devices);
        }

        // The CPU's GEMM rate is measured before the rows and again after, and
        // the better kept: other work on a shared machine only ever slows it.
        parallel::Peak peak;
        if (writer) peak = parallel::device_peak(config.device, "fp32");
        std::vector<Measurement> results;
        std::vector<double> projected;
        std::stringstream list(strategies);
        for (std::string name; std::getline(list, name, ',');) {
          // Under mpirun the ranks run ddp and the pipelines together; single on rank 0 alone.
          const bool takes_part = !config.group || (name != "single" && name != "single_ckpt") || writer;
          const int64_t outside = memory_stats(config.device).allocated_bytes;  // the workload's model and batch
          Measurement m = takes_part ? run_strategy(name, w, plan, config) : Measurement(name);
          m.outside_bytes = outside;
          if (config.group) config.group->barrier()->wait();
          projection.ddp_buckets = std::max(1, m.ddp_buckets);
          results.push_back(m);
          const bool hybrid = name == "hybrid";
          parallel::ProjectionSettings settings = projection;
          if (hybrid) settings.mesh_data = config.mesh_data;
          projected.push_back(writer && m.skipped.empty()
                                  ? parallel::project_step_seconds(name, hybrid ? mesh_plan.profile : profile, settings)
                                  : 0);
        }

        if (!writer) return 0;
        auto devices_used = [&](const std::string& strategy) {
          if (strategy == "single" || strategy == "single_ckpt") return 1;
          if (strategy == "hybrid" || strategy == "hybrid-tp" || strategy == "cp-tp")
            return config.mesh_data * config.mesh_pipeline;
          return config.devices;
        };
        const Measurement* single = nullptr;
        for (const Measurement& m : results)
          if (m.strategy == "single" && m.skipped.empty()) single = &m;
        // MFU against the peak of the devices a row uses: a GPU's data-sheet
        // rate each, or the CPU's GEMM rate measured now (parallel/planner/mfu.h). Devices
        // that are one (a repeated GPU, the threads' one CPU) have one peak; an
        // mpirun rank on the CPU measures its share of the cores.
        if (config.device.is_cpu()) peak.flops_per_s = std::max(peak.flops_per_s, parallel::measure_cpu_gemm_flops());
        auto peak_of = [&](int used) { return peak.flops_per_s * (shared && !config.group ? 1 : used); };
        std::printf("\n%-12s %10s %8s %6s %9s %9s %9s %9s %9s %9s %10s %11s %9s %6s\n", "strategy", "samples/s",
                    "speed-up", "eff.", "step ms", "compute", "comm", "idle", "peak MB", "model MB", "MB/step",
                    "projected", "GFLOP/s", "MFU");
        for (size_t i = 0; i < results.size(); ++i) {
          const Measurement& m = results[i];
          if (!m.skipped.empty()) {
            std::printf("%-12s skipped: %s\n", m.strategy.c_str(), m.skipped.c_str());
            continue;
          }
          const double speedup = single ? single->step_s / m.step_s : 0;
          const int used = devices_used(m.strategy);
          char comm[16], model_mb[16], projected_ms[16];
          if (projected[i] >= 0)
            std::snprintf(projected_ms, sizeof projected_ms, "%8.2f ms", 1e3 * projected[i]);
          else
            std::snprintf(projected_ms, sizeof projected_ms, "%8s   ", "-");
          if (m.split_known)
            std::snprintf(comm, sizeof comm, "%9.2f", 1e3 * m.comm_s);
          else
            std::snprintf(comm, sizeof comm, "%9s", "-");
          if (m.modeled_state_bytes > 0)
            std::snprintf(model_mb, sizeof model_mb, "%9.1f", m.modeled_state_bytes / 1e6);
          else
            std::snprintf(model_mb, sizeof model_mb, "%9s", "");
          const double achieved = model_flops / m.step_s;
          std::printf("%-12s %10.1f %7.2fx %5.0f%% %9.2f %9.2f %s %9.2f %9.1f %s %9.2f%s %s %9.2f %5.1f%%\n",
                      m.strategy.c_str(), batch / m.step_s, speedup, 100 * speedup / used, 1e3 * m.step_s,
                      1e3 * m.compute_s, comm, 1e3 * m.idle_s, m.peak_bytes / 1e6, model_mb, m.comm_bytes / 1e6,
                      m.comm_bytes_measured ? " " : "*", projected_ms, achieved / 1e9,
                      peak_of(used) > 0 ? 100 * achieved / peak_of(used) : 0.0);
        }
        std::printf("(* computed from tensor sizes; other byte counts measured. comm '-': not separated from "
                    "compute. model MB: parameters + gradients + Adam state per rank by the ZeRO accounting; peak MB "
                    "is the allocator's: per rank under mpirun, all ranks together when they are threads. "
                    "Projection: %s link, %.0f GB/s, %.0f us; traces in %s/. GFLOP/s: the model's %.3f GFLOP a "
                    "step (counted) over the step time; MFU against %s%s)\n",
                    link_name.c_str(), projection.link.bandwidth_bytes_per_s / 1e9, projection.link.latency_s * 1e6,
                    config.trace_dir.c_str(), model_flops / 1e9, peak.source.c_str(),
                    shared && !config.group ? ", once for the devices that are one" : " per device used");
        if (timelines)
          for (const Measurement& m : results)
            if (!m.timeline.empty())
              std::printf("%s, the last step as measured:\n%s", m.strategy.c_str(),
                          m.timeline.c_str());
        for (size_t i = 0; i < results.size(); ++i) {
          const Measurement& m = results[i];
          if (!m.skipped.empty()) continue;
          std::printf("{\"bench\": \"compare_parallel\", \"model\": \"%s\", \"strategy\": \"%s\", \"devices\": %d, "
                      "\"device\": \"%s\", \"step_ms\": %.3f, \"samples_per_s\": %.1f, \"compute_ms\": %.3f, "
                      "\"comm_ms\": %s, \"idle_ms\": %.3f, \"peak_bytes\": %lld, \"outside_bytes\": %lld, "
                      "\"modeled_state_bytes\": %lld, "
                      "\"comm_bytes\": %.0f, \"projected_ms\": %s, \"flops_per_step\": %lld, \"tflops\": %.6f, "
                      "\"tflops_per_rank\": %.6f, \"peak_tflops\": %.6f, \"mfu\": %s}\n",
                      model.c_str(), m.strategy.c_str(), devices_used(m.strategy),
                      config.device.str().c_str(), 1e3 * m.step_s, batch / m.step_s, 1e3 * m.compute_s,
                      m.split_known ? std::to_string(1e3 * m.comm_s).c_str() : "null", 1e3 * m.idle_s,
                      static_cast<long long>(m.peak_bytes), static_cast<long long>(m.outside_bytes),
                      static_cast<long long>(m.modeled_state_bytes),
                      m.comm_bytes, projected[i] >= 0 ? std::to_string(1e3 * projected[i]).c_str() : "null",
                      static_cast<long long>(model_flops), model_flops / m.step_s / 1e12,
                      model_flops / m.step_s / 1e12 / devices_used(m.strategy),
                      peak_of(devices_used(m.strategy)) / 1e12,
                      peak_of(devices_used(m.strategy)) > 0
                          ? std::to_string(model_flops / m.step_s / peak_of(devices_used(m.strategy))).c_str()
                          : "null");
        }
        // A run that measured nothing is a failure, not an empty CSV and a chart that cannot be drawn
        // (once reported as "gnuplot is missing", with gnuplot installed, and status 0).
        std::string skipped;
        for (const Measurement& m : results) skipped += (skipped.empty() ? "" : "; ") + m.strategy + ": " + m.skipped;
        LOOM_CHECK(std::any_of(results.begin(), results.end(), [](const Measurement& m) { return m.skipped.empty(); }),
                   "every strategy was skipped, so there is no CSV and no chart; ", skipped);
        write_csv(out + ".csv", results, projected, batch);
        const std::string title = model + " on " + std::to_string(config.devices) + " x " + config.device.str();
        const std::string no_chart = plot(out + ".csv", out + ".png", title);
        if (no_chart.empty())
          std::printf("chart: %s.png\n", out.c_str());
        else
          std::printf("no chart: %s; data in %s.csv\n", no_chart.c_str(), out.c_str());
        return 0;
      },
      parallel::abandon_job);
}
