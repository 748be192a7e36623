// bench/plan: before a launch, what every strategy would need and take for
// one of the benchmark models on a cluster (parallel/planner/planner.h).
//
//   bazel-bin/bench/plan --model gpt --cluster 2x8xh100-sxm --batch 512 --precision bf16
//   bazel-bin/bench/plan --model mlp --cluster 2xcpu --json     # this machine, two ranks
//
// The model is measured once on this machine's CPU at a few samples; the
// rest is the planner's model of the cluster. --json prints one object a
// row (the test checking the planner against compare_parallel reads them).
#include <cstdio>
#include <sstream>

#include "bench/workloads.h"
#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "parallel/planner/planner.h"

using namespace loom;
using namespace loom::examples;

int main(int argc, char** argv) {
  return run_program("plan", [&] {
    Flags flags("What each parallel strategy would need of every rank's memory, whether it fits, its step time and "
                "MFU, before a launch");
    std::string model = "gpt", cluster = "cpu", strategies;
    bench::MlpShape mlp;
    bench::GptShape gpt_shape;
    parallel::PlanOptions options;
    bool json = false;
    flags.add("--model", model, "cnn, gpt, gpt_large, lstm or mlp (bench/workloads.h)", Scope::Job,
              CLI::IsMember({"cnn", "gpt", "gpt_large", "lstm", "mlp"}));
    flags.add("--mlp-hidden", mlp.hidden, "mlp: width", Scope::Job, integer_in<int64_t>(1, 1 << 16));
    flags.add("--mlp-layers", mlp.layers, "mlp: Linear layers", Scope::Job, integer_in(2, 1024));
    flags.add("--mlp-batch", mlp.batch, "mlp: the sample batch", Scope::Job, integer_in<int64_t>(1, 1 << 20));
    flags.add("--gpt-context", gpt_shape.context, "gpt: sequence length (0: 64)", Scope::Job,
              integer_in<int64_t>(0, 1 << 20));
    flags.add("--gpt-batch", gpt_shape.batch, "gpt: sequences in the sample batch (0: 8)", Scope::Job,
              integer_in<int64_t>(0, 1 << 20));
    flags.add("--cluster", cluster,
              "KIND, NxKIND or NODESxNxKIND of h100-sxm, h100-pcie, h200, a100-sxm; or cpu, Nxcpu (this machine "
              "shared by N ranks)",
              Scope::Job);
    flags.add("--batch", options.global_batch, "global batch, samples a step over all ranks (0: the model's own)",
              Scope::Job, integer_in<int64_t>(0, int64_t{1} << 40));
    flags.add("--precision", options.precision, "fp32, tf32, bf16, fp16 or fp8", Scope::Job,
              CLI::IsMember({"fp32", "tf32", "bf16", "fp16", "fp8"}));
    flags.add("--optimizer", options.optimizer, "adamw, sgd or sgd-momentum", Scope::Job,
              CLI::IsMember({"adamw", "sgd", "sgd-momentum"}));
    flags.add("--micro-batches", options.micro_batches, "pipeline micro-batches per step", Scope::Job,
              integer_in(1, 1 << 16));
    flags.add("--efficiency", options.compute_efficiency,
              "share of the peak a step reaches (0: measured on a CPU, 0.5 on a GPU)", Scope::Job, number_in(0, 1));
    flags.add("--strategies", strategies, "comma-separated subset (default: every one that applies)", Scope::Job);
    std::string boundaries;
    flags.add("--stage-boundaries", boundaries,
              "pipelines: the children each stage after the first begins at, comma-separated (default: where their "
              "measured times balance; compare_parallel prints its own)",
              Scope::Job, index_list());
    flags.add_switch("--json", json, "one JSON object a row instead of the table", Scope::Job);
    flags.parse(argc, argv);

    options.cluster = parallel::parse_cluster(cluster);
    std::stringstream names(strategies);
    for (std::string name; std::getline(names, name, ',');) options.strategies.push_back(name);
    options.stage_boundaries = parse_index_list(boundaries);
    const bench::Workload w = bench::make_workload(model, Device::cpu(), mlp, gpt_shape);
    if (options.global_batch == 0) options.global_batch = w.input.size(0);
    const parallel::PlanReport plan = parallel::plan(*w.model, {w.input, w.target, w.loss}, options);
    std::fputs((json ? plan.json_lines() : plan.table()).c_str(), stdout);
    return 0;
  });
}
