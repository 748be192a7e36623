// Checks of subgroups for any backend, run by every rank of the group:
// split by color and key, new_group, subgroups of subgroups, and a device
// mesh — each checked by what its collectives compute.
#pragma once

#include <gtest/gtest.h>

#include "parallel/comm/device_mesh.h"
#include "parallel/comm/process_group.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {

// The sum of `values` over the ranks of `group` (a CPU all_reduce).
inline double group_sum(ProcessGroup& group, double value) {
  Tensor t = full({1}, value, {.dtype = kFloat64});
  group.all_reduce(t)->wait();
  return t.item();
}

inline void check_split(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  // Even and odd ranks, each ordered backwards (key = -rank).
  std::shared_ptr<ProcessGroup> parity = pg.split(r % 2, -r);
  ASSERT_NE(parity, nullptr);
  int expected_size = 0, expected_rank = 0;
  double expected_sum = 0;
  for (int q = r % 2; q < n; q += 2) {
    ++expected_size;
    expected_sum += q;
    if (q > r) ++expected_rank;
  }
  EXPECT_EQ(parity->size(), expected_size);
  EXPECT_EQ(parity->rank(), expected_rank);
  EXPECT_EQ(group_sum(*parity, r), expected_sum);
  EXPECT_EQ(parity->backend(), pg.backend());

  // Not every rank joins: a negative color gets nothing.
  std::shared_ptr<ProcessGroup> first_only = pg.split(r == 0 ? 0 : -1);
  EXPECT_EQ(first_only != nullptr, r == 0);
  if (first_only) {
    EXPECT_EQ(first_only->size(), 1);
  }

  // new_group in a chosen order: the last rank first.
  std::shared_ptr<ProcessGroup> pair = n > 1 ? pg.new_group({n - 1, 0}) : pg.new_group({0});
  EXPECT_EQ(pair != nullptr, r == 0 || r == n - 1);
  if (pair && n > 1) {
    EXPECT_EQ(pair->rank(), r == n - 1 ? 0 : 1);
    Tensor t = full({2}, r == n - 1 ? 7.0 : 0.0);
    pair->broadcast(t, 0)->wait();  // from its rank 0: this group's last rank
    loom::testing::expect_values(t, {7, 7});
  }
  // The parent goes on, and a subgroup of a subgroup works.
  EXPECT_EQ(group_sum(pg, 1), n);
  std::shared_ptr<ProcessGroup> single = parity->split(parity->rank());
  EXPECT_EQ(single->size(), 1);
  EXPECT_EQ(group_sum(*single, 5), 5);
  EXPECT_THROW_MSG(pg.new_group({0, 0}), "listed twice");
}

// n = data x pipe ranks (pipe = 2 when n is even, else 1).
inline void check_mesh(ProcessGroup& pg) {
  const int n = pg.size(), r = pg.rank();
  const int pipe = n % 2 == 0 ? 2 : 1, data = n / pipe;
  DeviceMesh mesh(std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {}), {{"data", data}, {"pipeline", pipe}});
  EXPECT_EQ(mesh.coordinate("data"), r / pipe);
  EXPECT_EQ(mesh.coordinate("pipeline"), r % pipe);
  EXPECT_EQ(mesh.group("pipeline")->size(), pipe);
  EXPECT_EQ(mesh.group("pipeline")->rank(), r % pipe);
  EXPECT_EQ(mesh.group("data")->size(), data);
  EXPECT_EQ(mesh.group("data")->rank(), r / pipe);
  // A pipeline holds one data coordinate: the sum of its ranks; the data group one stage.
  double pipeline_sum = 0, data_sum = 0;
  for (int p = 0; p < pipe; ++p) pipeline_sum += (r / pipe) * pipe + p;
  for (int d = 0; d < data; ++d) data_sum += d * pipe + r % pipe;
  EXPECT_EQ(group_sum(*mesh.group("pipeline"), r), pipeline_sum);
  EXPECT_EQ(group_sum(*mesh.group("data"), r), data_sum);
  EXPECT_THROW_MSG(mesh.group("tensor"), "no dimension 'tensor'");
  EXPECT_THROW_MSG(DeviceMesh(mesh.world(), {{"data", n + 1}}), "makes " + std::to_string(n + 1) + " ranks");
}

}  // namespace loom::parallel::testing
