#include "parallel/planner/cluster.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "parallel/planner/mfu.h"
#include "tensor/error.h"
#include "tensor/memory_budget.h"

namespace loom::parallel {
namespace {

std::string kinds() {
  std::string all = "cpu";
  for (const DeviceSpec& d : gpu_table()) all += ", " + d.kind;
  return all;
}

// A positive count at the front of `text` followed by 'x', consumed; 0 if none.
int take_count(std::string& text) {
  const size_t x = text.find('x');
  if (x == std::string::npos || x == 0 || text.find_first_not_of("0123456789") != x) return 0;
  const long n = std::strtol(text.substr(0, x).c_str(), nullptr, 10);
  LOOM_CHECK(n >= 1 && n <= 100000, "cluster: count '", text.substr(0, x), "' is not from 1 to 100000");
  text = text.substr(x + 1);
  return static_cast<int>(n);
}

}  // namespace

DeviceSpec this_cpu() {
  const double gemm = measure_cpu_gemm_flops();
  DeviceSpec cpu{"cpu", "this machine's CPU", available_memory().bytes, gemm, gemm, gemm, gemm, {}};
  // Ranks on one machine talk through shared memory (threads) or Open MPI's
  // shared-memory transport: a few GB/s once copies and waits are counted.
  cpu.node_link = {5e9, 20e-6};
  return cpu;
}

std::string Cluster::describe() const {
  char text[256];
  std::snprintf(text, sizeof text, "%d node%s x %d %s (%s, %.1f GFLOP/s fp32 each)", nodes, nodes == 1 ? "" : "s",
                devices_per_node, device.name.c_str(), format_bytes(device.memory_bytes).c_str(), device.fp32 / 1e9);
  return text;
}

Cluster parse_cluster(const std::string& text) {
  std::string rest = text;
  const int first = take_count(rest), second = take_count(rest);
  Cluster c;
  if (rest == "cpu") {
    LOOM_CHECK(second == 0, "cluster '", text, "': this machine is one node: 'cpu' or 'Nxcpu'");
    const int ranks = first == 0 ? 1 : first;
    c.device = this_cpu();
    // The ranks share the machine: each gets its share of the memory and of
    // the cores. The GEMM ran on this process's threads; the machine's rate
    // is taken as that times cores / threads.
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double machine = cores / std::min<double>(omp_get_max_threads(), cores);
    c.device.memory_bytes /= ranks;
    for (double* peak : {&c.device.fp32, &c.device.tf32, &c.device.bf16, &c.device.fp8}) *peak *= machine / ranks;
    c.devices_per_node = ranks;
    return c;
  }
  const DeviceSpec* gpu = find_gpu(rest);
  LOOM_CHECK(gpu != nullptr, "cluster '", text, "': unknown device kind '", rest, "' (known: ", kinds(),
             "); write it as KIND, NxKIND or NODESxNxKIND");
  c.device = *gpu;
  c.nodes = second == 0 ? 1 : first;
  c.devices_per_node = second == 0 ? (first == 0 ? 1 : first) : second;
  return c;
}

}  // namespace loom::parallel
