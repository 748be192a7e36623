// Checks of HostStagedGroup with CUDA tensors, for any inner backend: every
// operation runs twice through the same group, on CPU tensors (which the
// backend tests check against hand-computed values) and on CUDA copies of
// them, and the results must be equal. Every rank calls each function.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "parallel/comm/process_group.h"
#include "tests/parallel/collective_checks.h"

namespace loom::parallel::testing {

inline Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

inline void expect_same(const Tensor& gpu, const Tensor& cpu, const char* what) {
  ASSERT_TRUE(gpu.device().is_cuda()) << what;
  EXPECT_EQ(gpu.shape(), cpu.shape()) << what;
  EXPECT_EQ(loom::testing::values(gpu.to(Device::cpu())), loom::testing::values(cpu)) << what;
}

inline void check_staged_cuda_matches_cpu(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    SCOPED_TRACE(::testing::Message() << "rank " << r << ", " << dtype);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      Tensor cpu = rank_tensor(r, {1000}, dtype), gpu = on_gpu(cpu);
      pg.all_reduce(cpu, op)->wait();
      pg.all_reduce(gpu, op)->wait();
      expect_same(gpu, cpu, "all_reduce");
    }
    Tensor cpu = rank_tensor(r, {3, 5}, dtype), gpu = on_gpu(cpu);
    pg.broadcast(cpu, n - 1)->wait();
    pg.broadcast(gpu, n - 1)->wait();
    expect_same(gpu, cpu, "broadcast");

    Tensor in = rank_tensor(r, {4}, dtype);
    Tensor flat_cpu = zeros({4 * n}, {.dtype = dtype}), flat_gpu = on_gpu(flat_cpu);
    pg.all_gather(flat_cpu, in)->wait();
    pg.all_gather(flat_gpu, on_gpu(in))->wait();
    expect_same(flat_gpu, flat_cpu, "all_gather into a tensor");
    std::vector<Tensor> list_cpu, list_gpu;
    for (int q = 0; q < n; ++q) list_cpu.push_back(zeros({2, 2}, {.dtype = dtype}));
    for (int q = 0; q < n; ++q) list_gpu.push_back(on_gpu(list_cpu[q]));
    pg.all_gather(list_cpu, in)->wait();
    pg.all_gather(list_gpu, on_gpu(in))->wait();
    for (int q = 0; q < n; ++q) expect_same(list_gpu[q], list_cpu[q], "all_gather into a list");

    Tensor scattered_cpu = zeros({3}, {.dtype = dtype}), scattered_gpu = on_gpu(scattered_cpu);
    Tensor whole = rank_tensor(r, {3 * n}, dtype);
    pg.reduce_scatter(scattered_cpu, whole)->wait();
    pg.reduce_scatter(scattered_gpu, on_gpu(whole))->wait();
    expect_same(scattered_gpu, scattered_cpu, "reduce_scatter");
  }
  // A ring of sends: rank r sends to r + 1 and receives from r - 1.
  if (n > 1) {
    Tensor out = on_gpu(rank_tensor(r, {6}, kFloat32)), got = on_gpu(zeros({6}));
    WorkPtr sent = pg.send(out, (r + 1) % n, 3);
    pg.recv(got, (r + n - 1) % n, 3)->wait();
    sent->wait();
    expect_same(got, rank_tensor((r + n - 1) % n, {6}, kFloat32), "send/recv");
  }
  // Results waited for only through the last operation are there too: the
  // group completes in order, and the copies back share one stream.
  std::vector<Tensor> sums;
  WorkPtr last;
  for (int k = 0; k < 5; ++k) {
    sums.push_back(on_gpu(full({100}, r + k)));
    last = pg.all_reduce(sums.back());
  }
  last->wait();
  for (int k = 0; k < 5; ++k) expect_same(sums[k], full({100}, n * (n - 1) / 2.0 + n * k), "unwaited all_reduce");
}

}  // namespace loom::parallel::testing
