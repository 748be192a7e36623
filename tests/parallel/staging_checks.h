// Checks of a group that moves CUDA tensors (HostStagedGroup over any inner
// backend, NcclGroup): every operation runs twice through the same group, on
// CPU tensors (which the backend tests check against hand-computed values) and
// on CUDA copies of them, and the results must be equal. Every rank calls
// each function, with its own device.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "parallel/comm/process_group.h"
#include "tensor/device_queue.h"
#include "tests/parallel/collective_checks.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {


inline void expect_same(const Tensor& gpu, const Tensor& cpu, const char* what) {
  ASSERT_TRUE(gpu.device().is_cuda()) << what;
  EXPECT_EQ(gpu.shape(), cpu.shape()) << what;
  EXPECT_EQ(loom::testing::values(gpu.to(Device::cpu())), loom::testing::values(cpu)) << what;
}

// A receive lands after the work its receiver queued before it, as every
// operation's results do: each rank sends first, then keeps its own queue
// busy for milliseconds, overwrites the target (-1) and receives into it. A
// receive that did not wait for that queue would be overwritten by the -1.
// Own queues, not the default stream, so that the senders do not wait for it.
inline void check_recv_after_queued_work(ProcessGroup& pg, Device device) {
  const int n = pg.size(), r = pg.rank();
  if (n < 2) return;
  DeviceQueue own(device);
  DeviceQueue::Scope on_own(own);
  Tensor out = rank_tensor(r, {6}, kFloat32).to(device), got = zeros({6}, {.device = device});
  WorkPtr sent = pg.send(out, (r + 1) % n, 5);
  Tensor busy = full({2048, 2048}, 1.0 / 2048, {.device = device});
  for (int k = 0; k < 16; ++k) busy = busy.matmul(busy);  // stays 1/2048
  got.fill_(-1);
  pg.recv(got, (r + n - 1) % n, 5)->wait();
  sent->wait();
  expect_same(got, rank_tensor((r + n - 1) % n, {6}, kFloat32), "recv after queued work");
}

inline void check_cuda_matches_cpu(ProcessGroup& pg, Device device) {
  const int n = pg.size(), r = pg.rank();
  auto on_gpu = [device](const Tensor& t) { return t.to(device); };
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

    // Uneven pieces (rank q has q + 1 elements) and empty tensors.
    const int64_t total = n * (n + 1) / 2;
    Tensor mine = rank_tensor(r, {r + 1}, dtype);
    Tensor uneven_cpu = zeros({total}, {.dtype = dtype}), uneven_gpu = on_gpu(uneven_cpu);
    pg.all_gather(uneven_cpu, mine)->wait();
    pg.all_gather(uneven_gpu, on_gpu(mine))->wait();
    expect_same(uneven_gpu, uneven_cpu, "uneven all_gather");
    Tensor piece_cpu = zeros({r + 1}, {.dtype = dtype}), piece_gpu = on_gpu(piece_cpu);
    Tensor all = rank_tensor(r, {total}, dtype);
    pg.reduce_scatter(piece_cpu, all)->wait();
    pg.reduce_scatter(piece_gpu, on_gpu(all))->wait();
    expect_same(piece_gpu, piece_cpu, "uneven reduce_scatter");
    Tensor nothing = on_gpu(zeros({0}, {.dtype = dtype}));
    pg.all_reduce(nothing)->wait();
    pg.broadcast(nothing, 0)->wait();
    EXPECT_EQ(nothing.numel(), 0);
  }
  {  // Avg (NCCL's own ncclAvg): equal to the CPU's mean up to rounding
    Tensor cpu = rank_tensor(r, {257}, kFloat64), gpu = on_gpu(cpu);
    pg.all_reduce(cpu, ReduceOp::Avg)->wait();
    pg.all_reduce(gpu, ReduceOp::Avg)->wait();
    SCOPED_TRACE("all_reduce avg");
    EXPECT_LT(loom::testing::max_rel_error(gpu.to(Device::cpu()), cpu), 1e-15);
  }
  // A ring of sends: rank r sends to r + 1 and receives from r - 1.
  if (n > 1) {
    Tensor out = on_gpu(rank_tensor(r, {6}, kFloat32)), got = on_gpu(zeros({6}));
    WorkPtr sent = pg.send(out, (r + 1) % n, 3);
    pg.recv(got, (r + n - 1) % n, 3)->wait();
    sent->wait();
    expect_same(got, rank_tensor((r + n - 1) % n, {6}, kFloat32), "send/recv");
  }
  check_recv_after_queued_work(pg, device);
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

inline void check_staged_cuda_matches_cpu(ProcessGroup& pg) {
  check_cuda_matches_cpu(pg, Device::cuda(0));
  check_in_place(pg, Device::cuda(0));
}

}  // namespace loom::parallel::testing
