// The pre-flight memory check: what is available (MemAvailable, a cgroup's
// limit less its unreclaimable usage, LOOM_MEMORY_LIMIT_BYTES), the error
// that names the flag, the numbers and the largest value that fits, and the
// measured line of a step's memory.
#include "tensor/memory_budget.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "examples/models/models.h"
#include "tensor/creation.h"
#include "tests/test_util.h"

namespace loom::examples {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kGiB = int64_t{1} << 30, kMiB = int64_t{1} << 20;

// A fake root: /proc/meminfo, /proc/self/cgroup and cgroup folders under a temporary folder.
class FakeRoot {
 public:
  FakeRoot() {
    root_ = fs::path(::testing::TempDir()) / ("memory_budget_" + std::to_string(getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    put("proc/meminfo", "MemTotal:       33554432 kB\nMemFree:         1048576 kB\nMemAvailable:    8388608 kB\n");
    put("proc/self/cgroup", "0::/\n");
  }
  ~FakeRoot() { fs::remove_all(root_); }
  void put(const std::string& name, const std::string& text) {
    fs::create_directories((root_ / name).parent_path());
    std::ofstream(root_ / name) << text;
  }
  std::string path() const { return root_.string(); }

 private:
  fs::path root_;
};

class MemoryBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("LOOM_MEMORY_LIMIT_BYTES"); }
  void TearDown() override { unsetenv("LOOM_MEMORY_LIMIT_BYTES"); }
};

TEST_F(MemoryBudgetTest, FormatsBytes) {
  EXPECT_EQ(format_bytes(100), "100 bytes");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(41 * kGiB), "41.0 GiB");
}

TEST_F(MemoryBudgetTest, TheMachinesMemAvailable) {
  FakeRoot root;  // 8388608 kB = 8 GiB available
  const AvailableMemory m = available_memory(root.path());
  EXPECT_EQ(m.bytes, 8 * kGiB);
  EXPECT_EQ(m.where, "this machine has 8.0 GiB available");
}

// cgroup v1: the memory controller's line names the folder; the limit less
// the usage that is not inactive page cache is what is left, and the
// smallest over the enclosing cgroups counts.
TEST_F(MemoryBudgetTest, ACgroupV1LimitLeavesLess) {
  FakeRoot root;
  root.put("proc/self/cgroup", "5:cpu:/\n4:memory:/jobs/one\n0::/\n");
  const std::string mem = "sys/fs/cgroup/memory/";
  root.put(mem + "memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  root.put(mem + "jobs/memory.limit_in_bytes", std::to_string(3 * kGiB) + "\n");
  root.put(mem + "jobs/memory.usage_in_bytes", std::to_string(kGiB) + "\n");
  root.put(mem + "jobs/one/memory.limit_in_bytes", std::to_string(2 * kGiB) + "\n");
  root.put(mem + "jobs/one/memory.usage_in_bytes", std::to_string(1536 * kMiB) + "\n");
  root.put(mem + "jobs/one/memory.stat", "cache 1\ntotal_inactive_file " + std::to_string(kGiB) + "\n");
  const AvailableMemory m = available_memory(root.path());
  EXPECT_EQ(m.bytes, 1536 * kMiB);  // one: 2 GiB - (1.5 GiB - 1 GiB of cache); jobs leaves 2 GiB
  EXPECT_EQ(m.where, "this container's memory limit leaves 1.5 GiB");
}

// cgroup v2: "0::/path"; "max" is no limit. Inside a container the path may
// not exist under the mount, whose root is then the container's cgroup.
TEST_F(MemoryBudgetTest, ACgroupV2LimitLeavesLess) {
  FakeRoot root;
  root.put("proc/self/cgroup", "0::/job\n");
  root.put("sys/fs/cgroup/job/memory.max", "max\n");
  root.put("sys/fs/cgroup/memory.max", std::to_string(kGiB) + "\n");
  root.put("sys/fs/cgroup/memory.current", std::to_string(256 * kMiB) + "\n");
  EXPECT_EQ(available_memory(root.path()).bytes, 768 * kMiB);

  FakeRoot inside;
  inside.put("proc/self/cgroup", "0::/kubepods/pod1/abc\n");  // not under this mount
  inside.put("sys/fs/cgroup/memory.max", std::to_string(512 * kMiB) + "\n");
  inside.put("sys/fs/cgroup/memory.current", "0\n");
  EXPECT_EQ(available_memory(inside.path()).bytes, 512 * kMiB);
}

TEST_F(MemoryBudgetTest, TheEnvironmentStandsInForTheMachine) {
  FakeRoot root;
  setenv("LOOM_MEMORY_LIMIT_BYTES", "67108864", 1);
  const AvailableMemory m = available_memory(root.path());
  EXPECT_EQ(m.bytes, 64 * kMiB);
  EXPECT_EQ(m.where, "LOOM_MEMORY_LIMIT_BYTES allows 64.0 MiB");
  for (const char* bad : {"64M", "-1", "0", "1e9", "99999999999999999999"}) {
    setenv("LOOM_MEMORY_LIMIT_BYTES", bad, 1);
    EXPECT_THROW_MSG(available_memory(root.path()),
                     std::string("LOOM_MEMORY_LIMIT_BYTES: expected a number of bytes from 1 to ") +
                         "9223372036854775807, got '" + bad + "'");
  }
}

TEST_F(MemoryBudgetTest, RefusesNamingTheFlagTheNumbersAndWhatFits) {
  const AvailableMemory ten{10 * kGiB, "this machine has 10.0 GiB available"};
  MemoryDemand demand{.flag = "--batch-size",
                      .value = 60000,
                      .bytes = [](int64_t b) { return kGiB + b * kMiB; },
                      .what = "for a training step"};
  check_fits_in_memory({.flag = "--batch-size", .value = 8000, .bytes = demand.bytes}, ten);  // 8.8 GiB of 9
  // 90% of 10 GiB is 9216 MiB: 1024 + b MiB fit up to b = 8192, said as 8100 (two digits).
  EXPECT_THROW_MSG(check_fits_in_memory(demand, ten),
                   "--batch-size 60000 needs about 59.6 GiB for a training step; this machine has 10.0 GiB available; "
                   "a run may plan on 90% of it: try --batch-size 8100 or less");
  demand.copies = 2;
  demand.multiple_of = 2;
  EXPECT_THROW_MSG(check_fits_in_memory(demand, ten),
                   "--batch-size 60000 needs about 119.2 GiB for a training step (59.6 GiB for each of 2 processes on "
                   "this machine); this machine has 10.0 GiB available; a run may plan on 90% of it: try --batch-size "
                   "3500 or less");
  demand.bytes = [](int64_t b) { return 20 * kGiB + b; };
  demand.otherwise = "a smaller --width";
  EXPECT_THROW_MSG(check_fits_in_memory(demand, ten), "and even --batch-size 1 needs 40.0 GiB: try a smaller --width");
}

// A step that allocates a fixed 64 KiB and 4 KiB per sample: the line
// through two measured peaks finds both (the host allocator rounds a request
// up by at most 1/16, docs/architecture.md, "Memory").
TEST_F(MemoryBudgetTest, MeasuresAStepAsALineInTheBatchSize) {
  const StepMemory m = measure_step_memory(Device::cpu(), 1000, [](int64_t n) {
    Tensor fixed = empty({16 << 10});  // 64 KiB of float32
    Tensor per_sample = empty({n, 1024});
  });
  EXPECT_GE(m.per_sample, 4096);
  EXPECT_LE(m.per_sample, 4096 * 17 / 16);
  const int64_t exact = int64_t{60000} * 4096 + 65536;
  EXPECT_GE(m.at(60000), exact);
  EXPECT_LE(m.at(60000), exact * 17 / 16);
}

TEST_F(MemoryBudgetTest, TheCnnsParameterCountWithoutBuildingIt) {
  for (int64_t w : {1, 2, 3, 32, 64})
    EXPECT_EQ(models::fashion_cnn_num_parameters(w), models::fashion_cnn(w)->num_parameters()) << "width " << w;
}

}  // namespace
}  // namespace loom::examples
