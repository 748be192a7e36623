// Checks of every collective and point-to-point op against hand-computed
// results, written once for any ProcessGroup: each rank calls the same
// function with its own group. The threads tests run them in n threads, the
// MPI tests in n processes under mpirun.
//
//   TEST(Mpi, AllReduce) { loom::parallel::testing::check_all_reduce(*world()); }
//
// Every function issues the same collectives in the same order on every rank.
// Expected values are computed here with plain loops over the ranks, from the
// definition of each collective.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "parallel/comm/process_group.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {

using loom::testing::expect_values;

// The value rank r puts at element i in most checks: small integers, exact
// in every dtype, differing across ranks and elements (negative too).
inline double value(int r, int64_t i) { return static_cast<double>((r * 7 + i * 3) % 11) - 5; }

inline Tensor rank_tensor(int r, const Shape& shape, DType dtype) {
  std::vector<double> v(numel(shape));
  for (size_t i = 0; i < v.size(); ++i) v[i] = value(r, i);
  return from_vector<double>(v, shape, {.dtype = dtype});
}

inline std::vector<double> reduced(ReduceOp op, int n, int64_t count, int64_t first = 0) {
  std::vector<double> out(count);
  for (int64_t i = 0; i < count; ++i) {
    double acc = value(0, first + i);
    for (int r = 1; r < n; ++r) {
      double v = value(r, first + i);
      acc = op == ReduceOp::Max ? std::max(acc, v) : op == ReduceOp::Min ? std::min(acc, v) : acc + v;
    }
    out[i] = op == ReduceOp::Avg ? acc / n : acc;
  }
  return out;
}

// Sizes that are 0, smaller than the group, not divisible by it, and 2-D.
inline std::vector<Shape> awkward_shapes() { return {{0}, {1}, {2}, {7}, {3, 5}, {1000}}; }

inline void check_all_reduce(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  for (DType dtype : {kFloat32, kFloat64, kInt64})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      for (const Shape& shape : awkward_shapes()) {
        SCOPED_TRACE(::testing::Message() << "rank " << r << ", " << dtype << ", "
                                          << reduce_op_name(op) << ", shape " << shape);
        Tensor t = rank_tensor(r, shape, dtype);
        pg.all_reduce(t, op)->wait();
        EXPECT_EQ(t.shape(), shape);
        expect_values(t, reduced(op, n, t.numel()), 1e-6);
      }
    }
}

// bfloat16 and float16: every op on the same small integers, whose sums are
// exact in 16 bits; averages are the exact mean rounded to the dtype.
inline void check_all_reduce_16bit(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  for (DType dtype : {kBFloat16, kFloat16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
      for (const Shape& shape : awkward_shapes()) {
        SCOPED_TRACE(::testing::Message() << "rank " << r << ", " << dtype << ", "
                                          << reduce_op_name(op) << ", shape " << shape);
        Tensor t = rank_tensor(r, shape, dtype);
        pg.all_reduce(t, op)->wait();
        ASSERT_EQ(t.dtype(), dtype);
        EXPECT_EQ(t.shape(), shape);
        const Tensor expected = from_vector<double>(reduced(op, n, t.numel()), shape, {.dtype = dtype});
        expect_values(t, loom::testing::values(expected), 0);
      }
}

// Like expect_values, for large tensors: one failure with the count and the
// first mismatch, not one per element.
inline void expect_all(const Tensor& t, const std::vector<double>& expected) {
  std::vector<double> got = loom::testing::values(t);
  ASSERT_EQ(got.size(), expected.size());
  int64_t wrong = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != expected[i] && wrong++ == 0) first = i;
  EXPECT_EQ(wrong, 0) << "first at element " << first << ": got " << (first >= 0 ? got[first] : 0)
                      << ", expected " << (first >= 0 ? expected[first] : 0);
}

// Tensors of several MB, which the MPI backend moves in 4 MB pieces: every
// piece must land in its place (the values differ along the tensor).
inline void check_large_messages(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  const int64_t numel = 1'500'001;  // 12 MB of float64: 3 pieces, the last one short
  Tensor t = rank_tensor(r, {numel}, kFloat64);
  pg.all_reduce(t)->wait();
  expect_all(t, reduced(ReduceOp::Sum, n, numel));
  Tensor b = rank_tensor(r, {1'000'003}, kInt64);  // 8 MB and a bit
  pg.broadcast(b, n - 1)->wait();
  expect_all(b, loom::testing::values(rank_tensor(n - 1, {1'000'003}, kInt64)));
}

// int64 values above 2^53 survive exactly (no detour through double).
inline void check_all_reduce_int64_exact(ProcessGroup& pg) {
  const int64_t big = (int64_t{1} << 60) + 12345;
  Tensor t = from_vector<int64_t>({big, -big, pg.rank()});
  pg.all_reduce(t, ReduceOp::Max)->wait();
  std::vector<int64_t> got = t.to_vector<int64_t>();
  EXPECT_EQ(got[0], big);
  EXPECT_EQ(got[1], -big);
  EXPECT_EQ(got[2], pg.size() - 1);
}

inline void check_broadcast(ProcessGroup& pg) {
  const int r = pg.rank();
  for (int root = 0; root < pg.size(); ++root)
    for (DType dtype : {kFloat32, kFloat64, kInt64, kUInt8}) {
      SCOPED_TRACE(::testing::Message() << "rank " << r << ", root " << root << ", " << dtype);
      Tensor t = rank_tensor(r, {2, 3}, dtype == kUInt8 ? kInt64 : dtype).abs().to(dtype);
      pg.broadcast(t, root)->wait();
      Tensor expected = rank_tensor(root, {2, 3}, dtype == kUInt8 ? kInt64 : dtype).abs();
      expect_values(t, loom::testing::values(expected));
    }
  Tensor flags = from_vector<bool>({r == 0, r != 0, true});
  pg.broadcast(flags, 0)->wait();
  EXPECT_EQ(flags.to_vector<bool>(), (std::vector<bool>{true, false, true}));
}

// Rank q contributes q + 1 + extra elements with values 10 q + i.
inline std::vector<double> gathered(int n, int extra) {
  std::vector<double> out;
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < q + 1 + extra; ++i) out.push_back(10.0 * q + i);
  return out;
}

inline Tensor gather_input(int r, int extra, DType dtype) {
  std::vector<double> v;
  for (int i = 0; i < r + 1 + extra; ++i) v.push_back(10.0 * r + i);
  return from_vector<double>(v, {static_cast<int64_t>(v.size())}, {.dtype = dtype});
}

inline void check_all_gather(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  for (DType dtype : {kFloat32, kFloat64, kInt64}) {
    SCOPED_TRACE(::testing::Message() << "rank " << r << ", " << dtype);
    // Equal sizes into one tensor: 3 elements from each rank.
    Tensor in = from_vector<double>({10.0 * r, 10.0 * r + 1, 10.0 * r + 2}, {3}, {.dtype = dtype});
    Tensor out = full({n, 3}, -1, {.dtype = dtype});
    pg.all_gather(out, in)->wait();
    std::vector<double> expected;
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < 3; ++i) expected.push_back(10.0 * q + i);
    expect_values(out, expected);

    // Uneven sizes (rank q sends q + 1 elements): the total is not a multiple of n.
    Tensor uneven = full({n * (n + 1) / 2}, -1, {.dtype = dtype});
    pg.all_gather(uneven, gather_input(r, 0, dtype))->wait();
    expect_values(uneven, gathered(n, 0));

    // Into a list of tensors of any shape, one per rank.
    std::vector<Tensor> outs;
    for (int q = 0; q < n; ++q) outs.push_back(full({q + 2, 1}, -1, {.dtype = dtype}));
    pg.all_gather(outs, gather_input(r, 1, dtype))->wait();
    for (int q = 0; q < n; ++q) {
      std::vector<double> want;
      for (int i = 0; i < q + 2; ++i) want.push_back(10.0 * q + i);
      EXPECT_EQ(outs[q].shape(), Shape({q + 2, 1}));
      expect_values(outs[q], want);
    }
  }
}

inline void check_reduce_scatter(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  for (DType dtype : {kFloat32, kFloat64, kInt64})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      // Totals divisible by n and not; rank q gets total / n elements, one more
      // for the first total % n ranks.
      for (int64_t total : {int64_t{2} * n, int64_t{10}, int64_t{2} * n + n - 1, int64_t{0}}) {
        std::vector<int64_t> counts(n), first(n + 1, 0);
        for (int q = 0; q < n; ++q) counts[q] = total / n + (q < total % n ? 1 : 0);
        for (int q = 0; q < n; ++q) first[q + 1] = first[q] + counts[q];
        SCOPED_TRACE(::testing::Message() << "rank " << r << ", " << dtype << ", "
                                          << reduce_op_name(op) << ", total " << total);
        Tensor in = rank_tensor(r, {total}, dtype);
        Tensor out = full({counts[r]}, -99, {.dtype = dtype});
        pg.reduce_scatter(out, in, op)->wait();
        expect_values(out, reduced(op, n, counts[r], first[r]), 1e-6);
        expect_values(in, loom::testing::values(rank_tensor(r, {total}, dtype)));  // input untouched
      }
    }
}

// all_gather and reduce_scatter in place: a rank's piece is a view of the
// whole (sharded training's buckets), with uneven pieces (rank q has q + 1
// elements). A piece elsewhere in the whole is an error on every rank.
inline void check_in_place(ProcessGroup& pg, Device device = Device::cpu()) {
  const int n = pg.size(), r = pg.rank();
  const int64_t total = n * (n + 1) / 2, at = r * (r + 1) / 2;
  for (DType dtype : {kFloat32, kFloat64}) {
    SCOPED_TRACE(::testing::Message() << "rank " << r << ", " << dtype << " on " << device);
    Tensor whole = full({total}, -1, {.dtype = dtype}).to(device);
    whole.narrow(0, at, r + 1).copy_(gather_input(r, 0, dtype).to(device));
    pg.all_gather(whole, whole.narrow(0, at, r + 1))->wait();
    expect_values(whole.to(Device::cpu()), gathered(n, 0));

    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
      Tensor input = rank_tensor(r, {total}, dtype).to(device);
      pg.reduce_scatter(input.narrow(0, at, r + 1), input, op)->wait();
      std::vector<double> expected = loom::testing::values(rank_tensor(r, {total}, dtype));
      const std::vector<double> mine = reduced(op, n, r + 1, at);
      std::copy(mine.begin(), mine.end(), expected.begin() + at);
      expect_values(input.to(Device::cpu()), expected, 1e-6);  // the rest untouched
    }
  }
  if (n < 2) return;
  // Two pieces of one buffer that do not overlap are not in place: an ordinary all_gather.
  Tensor buffer = zeros({total}).to(device);
  buffer.narrow(0, n, 1).fill_(r + 1.0);
  pg.all_gather(buffer.narrow(0, 0, n), buffer.narrow(0, n, 1))->wait();
  std::vector<double> ranks_plus_one(n);
  for (int q = 0; q < n; ++q) ranks_plus_one[q] = q + 1;
  expect_values(buffer.narrow(0, 0, n).to(Device::cpu()), ranks_plus_one);

  Tensor whole = zeros({total}).to(device);
  const int64_t wrong = r == n - 1 ? 0 : at;  // the last rank passes the first piece's place
  EXPECT_THROW_MSG(pg.all_gather(whole, whole.narrow(0, wrong, r + 1))->wait(),
                   "in place on rank " + std::to_string(n - 1));
  EXPECT_THROW_MSG(pg.reduce_scatter(whole.narrow(0, wrong, r + 1), whole)->wait(),
                   "in place on rank " + std::to_string(n - 1));
  EXPECT_THROW_MSG(pg.all_gather(whole.narrow(0, 0, 2), whole.narrow(0, 1, 2))->wait(),
                   "overlaps the output without lying inside it");
}

inline void check_send_recv(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // A ring: everybody sends first, then receives (sends never wait for the receive).
  Tensor out = rank_tensor(r, {4, 2}, kFloat64);
  Tensor in = zeros({4, 2}, {.dtype = kFloat64});
  WorkPtr sent = pg.send(out, next, 3);
  pg.recv(in, prev, 3)->wait();
  sent->wait();
  expect_values(in, loom::testing::values(rank_tensor(prev, {4, 2}, kFloat64)));

  // A large message each way (beyond MPI's eager limit): still no deadlock.
  Tensor big_out = full({1 << 20}, r + 1.0), big_in = zeros({1 << 20});
  WorkPtr big_sent = pg.send(big_out, next, 4);
  pg.recv(big_in, prev, 4)->wait();
  big_sent->wait();
  expect_values(big_in.narrow(0, (1 << 20) - 3, 3), std::vector<double>(3, prev + 1.0));

  if (n < 2) return;
  // Tags keep messages apart; one tag keeps them in order.
  if (r == 0) {
    pg.send(full({2}, 1.0), 1, 7);
    pg.send(full({3}, 2.0, {.dtype = kInt64}), 1, 8);
    pg.send(full({2}, 3.0), 1, 7)->wait();
  } else if (r == 1) {
    Tensor b = zeros({3}, {.dtype = kInt64}), a1 = zeros({2}), a2 = zeros({2});
    WorkPtr wb = pg.recv(b, 0, 8);  // the second message sent, received first
    WorkPtr w1 = pg.recv(a1, 0, 7);
    WorkPtr w2 = pg.recv(a2, 0, 7);
    // Each receive finishes on its own (MPI orders only messages of one tag),
    // so which finishes first is not asserted: what each received is.
    w2->wait();
    w1->wait();
    wb->wait();
    expect_values(b, {2, 2, 2});
    expect_values(a1, {1, 1});
    expect_values(a2, {3, 3});
  }
}

// A receive finishes once its message is in, even while a send issued
// before it still waits for its receiver (a message beyond MPI's eager
// limit). Rank 1 posts the receive for rank 0's large message only after
// rank 0 has answered a small one, as the ranks of an interleaved pipeline
// do with an activation's header and then the activation: were the receive
// to wait for the earlier send, neither rank could go on.
inline void check_receive_does_not_wait_for_an_earlier_send(ProcessGroup& pg, Device device = Device::cpu()) {
  if (pg.size() < 2 || pg.rank() > 1) return;
  const TensorOptions on{.device = device};
  if (pg.rank() == 0) {
    WorkPtr big_sent = pg.send(full({1 << 20}, 5.0, on), 1, 21);
    Tensor ping = zeros({1}, on);
    pg.recv(ping, 1, 22)->wait();
    pg.send(ping + 1, 1, 23)->wait();
    big_sent->wait();
  } else {
    pg.send(full({1}, 1.0, on), 0, 22);
    Tensor pong = zeros({1}, on), big = zeros({1 << 20}, on);
    pg.recv(pong, 0, 23)->wait();
    expect_values(pong, {2});
    pg.recv(big, 0, 21)->wait();
    expect_values(big.narrow(0, (1 << 20) - 2, 2), {5, 5});
  }
}

// A later collective finishes only after every earlier one; the results show the order.
inline void check_in_order_completion(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  Tensor t = full({5}, r + 1.0, {.dtype = kFloat64});
  Tensor b = full({3}, r, {.dtype = kInt64});
  WorkPtr first = pg.all_reduce(t);          // n(n+1)/2
  WorkPtr second = pg.all_reduce(t);         // n * n(n+1)/2: only if the first was done
  WorkPtr third = pg.broadcast(b, n - 1);
  WorkPtr fourth = pg.barrier();
  fourth->wait();
  EXPECT_TRUE(first->is_completed() && second->is_completed() && third->is_completed());
  EXPECT_TRUE(first->is_success() && second->is_success() && third->is_success());
  expect_values(t, std::vector<double>(5, n * n * (n + 1) / 2.0));
  expect_values(b, std::vector<double>(3, n - 1));
}

// Many operations in flight at once, on different tensors, waited for in reverse.
inline void check_overlapping_ops(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  std::vector<Tensor> grads;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 8; ++k) {
    grads.push_back(full({100 + 37 * k}, (r + 1) * (k + 1.0)));
    works.push_back(pg.all_reduce(grads.back(), ReduceOp::Avg));
  }
  Tensor g = gather_input(r, 2, kFloat32), gout = zeros({n * (n + 1) / 2 + 2 * n});
  works.push_back(pg.all_gather(gout, g));
  Tensor busy = randn({64, 64}).matmul(randn({64, 64}));  // compute while they travel
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int k = 0; k < 8; ++k)
    expect_values(grads[k], std::vector<double>(100 + 37 * k, (n + 1) / 2.0 * (k + 1)), 1e-6);
  expect_values(gout, gathered(n, 2));
  EXPECT_EQ(busy.shape(), Shape({64, 64}));
}

inline void check_stats(ProcessGroup& pg) {
  const int64_t n = pg.size();
  CommStats before = pg.stats();
  Tensor t = zeros({100});                      // 400 bytes
  pg.all_reduce(t)->wait();
  Tensor out = zeros({n * 10}, {.dtype = kFloat64});  // 80 n bytes gathered
  pg.all_gather(out, zeros({10}, {.dtype = kFloat64}))->wait();
  pg.barrier()->wait();
  CommStats after = pg.stats();
  EXPECT_EQ(after.ops - before.ops, 3);
  EXPECT_EQ(after.bytes - before.bytes, 400 + 80 * n);
  EXPECT_EQ(after.bus_bytes - before.bus_bytes, 400 * 2 * (n - 1) / n + 80 * n * (n - 1) / n);
}

// Ranks that disagree all get an error naming the problem, and the group stays
// usable afterwards. Needs at least two ranks; the last rank is the odd one.
inline void check_mismatches(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  if (n < 2) return;
  const bool odd = r == n - 1;
  EXPECT_THROW_MSG(pg.all_reduce(zeros({odd ? 5 : 4}))->wait(),
                   "the ranks disagree on the number of elements: 4 on rank");
  EXPECT_THROW_MSG(pg.all_reduce(zeros({4}, {.dtype = odd ? kFloat64 : kFloat32}))->wait(),
                   "the ranks disagree on the dtype");
  EXPECT_THROW_MSG(pg.all_reduce(zeros({4}), odd ? ReduceOp::Max : ReduceOp::Sum)->wait(),
                   "the ranks disagree on the reduce op");
  EXPECT_THROW_MSG(pg.broadcast(zeros({4}), odd ? 1 : 0)->wait(), "the ranks disagree on the root");
  EXPECT_THROW_MSG((odd ? pg.broadcast(zeros({4}), 0) : pg.all_reduce(zeros({4})))->wait(),
                   "the ranks called different collectives");
  EXPECT_THROW_MSG((odd ? pg.barrier() : pg.all_reduce(zeros({4})))->wait(),
                   "the ranks called different collectives");
  EXPECT_THROW_MSG(pg.all_gather(zeros({odd ? 2 * n + 1 : 2 * n}), zeros({2}))->wait(),
                   "the output on rank");
  std::vector<Tensor> outs;
  for (int q = 0; q < n; ++q) outs.push_back(zeros({odd && q == 0 ? 3 : 2}));
  EXPECT_THROW_MSG(pg.all_gather(outs, zeros({2}))->wait(),
                   "do not match the sizes of the ranks' inputs");
  EXPECT_THROW_MSG(pg.reduce_scatter(zeros({odd ? 2 : 1}), zeros({n}))->wait(), "but the input has");
  // A message of the wrong size: the receiver says what arrived.
  if (r == 0) pg.send(zeros({5}), 1, 9)->wait();
  if (r == 1)
    EXPECT_THROW_MSG(pg.recv(zeros({4}), 0, 9)->wait(),
                     "rank 0 sent 5 x float32, but this recv expects 4 x float32");
  if (r == 0) pg.send(zeros({4}, {.dtype = kInt64}), 1, 9)->wait();
  if (r == 1)
    EXPECT_THROW_MSG(pg.recv(zeros({4}, {.dtype = kFloat64}), 0, 9)->wait(), "sent 4 x int64");
  // Still usable.
  Tensor t = full({3}, 1.0);
  pg.all_reduce(t)->wait();
  expect_values(t, std::vector<double>(3, n));
}

}  // namespace loom::parallel::testing
