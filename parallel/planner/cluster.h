// The hardware a plan is made for: N nodes of one device kind from the table
// (device_table.h), or this machine's CPU.
//
//   parallel::Cluster c = parallel::parse_cluster("2x8xh100-sxm");  // 2 nodes of 8 H100 SXM
//   c.devices();                       // 16
//   c.device.peak_flops("bf16");       // 989.4e12
//   c.link_for(8);                     // NVLink: a group of 8 fits in a node
//   c.link_for(16);                    // the inter-node network
//
// Between nodes the default is 400 Gb/s InfiniBand, one adapter per GPU
// (about 45 GB/s achieved). "cpu" is this machine: its memory is what a run may use
// now (tensor/memory_budget.h) and its peak the float32 GEMM rate measured
// when the cluster is made (mfu.h), since a CPU has no data-sheet rate a
// run can reach.
#pragma once

#include <string>

#include "parallel/planner/device_table.h"

namespace loom::parallel {

// This machine's CPU: the memory a run may use now and the measured GEMM
// rate (the same at every precision: loom's CPU products run in float32).
DeviceSpec this_cpu();

struct Cluster {
  DeviceSpec device;
  int devices_per_node = 1;
  int nodes = 1;
  // Between nodes. Default: 400 Gb/s InfiniBand per GPU.
  Link inter_node{45e9, 10e-6};
  int devices() const { return devices_per_node * nodes; }
  // The link a group of `ranks` consecutive ranks talks over: the node's
  // while the group fits in a node, else the network.
  const Link& link_for(int ranks) const { return ranks <= devices_per_node ? device.node_link : inter_node; }
  std::string describe() const;  // "2 nodes x 8 NVIDIA H100 SXM 80GB (80.0 GiB, ...)"
};

// "h100-sxm" (one device), "8xh100-sxm" (a node of 8), "2x8xh100-sxm" (2
// nodes of 8), "cpu" or "2xcpu" (this machine, its cores shared by 2 ranks
// as under mpirun -np 2). Throws loom::Error naming the text and the kinds.
Cluster parse_cluster(const std::string& text);

}  // namespace loom::parallel
