#include "tensor/memory_budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/error.h"

namespace loom {
namespace {

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
// cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712); anything this
// large is none.
constexpr int64_t kUnlimitedAbove = int64_t{1} << 60;

// A non-negative decimal integer that is the whole text, or -1.
int64_t whole_number(const std::string& text) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  return value > static_cast<unsigned long long>(kNoLimit) ? -1 : static_cast<int64_t>(value);
}

// The first line of a file, without its newline; "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A field of a "name value" file (/proc/meminfo's "MemAvailable: 123 kB", memory.stat's "inactive_file 123"),
// or -1.
int64_t field(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string key, value;
    words >> key >> value;
    if (key == name || key == name + ":") return whole_number(value);
  }
  return -1;
}

// What one cgroup folder's limit leaves: the limit less what is in use and
// not reclaimable page cache. kNoLimit when it sets none.
int64_t left_in_cgroup(const std::string& folder, const std::string& limit_file, const std::string& usage_file,
                       const std::string& inactive_field) {
  const std::string limit_text = first_line(folder + "/" + limit_file);
  const int64_t limit = whole_number(limit_text);
  if (limit < 0 || limit >= kUnlimitedAbove) return kNoLimit;  // "max", unreadable, or v1's "none"
  int64_t used = std::max<int64_t>(0, whole_number(first_line(folder + "/" + usage_file)));
  const int64_t inactive = field(folder + "/memory.stat", inactive_field);
  if (inactive > 0) used = std::max<int64_t>(0, used - inactive);
  return std::max<int64_t>(0, limit - used);
}

// The least any enclosing cgroup leaves, from this process's cgroup up to the
// hierarchy's root: cgroup v2 (the "0::/path" line) and v1 (the memory controller's line).
int64_t left_in_cgroups(const std::string& root) {
  std::ifstream in(root + "/proc/self/cgroup");
  int64_t least = kNoLimit;
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    const std::string path = line.substr(second + 1);
    std::vector<std::string> mounts;
    std::string limit_file, usage_file, inactive_field;
    if (controllers == ",,") {  // v2: the unified hierarchy
      mounts = {root + "/sys/fs/cgroup", root + "/sys/fs/cgroup/unified"};
      limit_file = "memory.max", usage_file = "memory.current", inactive_field = "inactive_file";
    } else if (controllers.find(",memory,") != std::string::npos) {
      mounts = {root + "/sys/fs/cgroup/memory"};
      limit_file = "memory.limit_in_bytes", usage_file = "memory.usage_in_bytes";
      inactive_field = "total_inactive_file";
    } else {
      continue;
    }
    for (const std::string& mount : mounts) {
      // Inside a container the mount is often the container's own cgroup, and the path
      // /proc/self/cgroup names does not exist under it: then the mount's root is the cgroup.
      std::string folder = mount + (path == "/" ? "" : path);
      if (!std::ifstream(folder + "/" + limit_file)) folder = mount;
      for (;;) {
        least = std::min(least, left_in_cgroup(folder, limit_file, usage_file, inactive_field));
        if (folder.size() <= mount.size()) break;
        folder = folder.substr(0, folder.rfind('/'));
      }
    }
  }
  return least;
}

int64_t round_to_two_digits(int64_t value) {
  int64_t scale = 1;
  while (value / scale >= 100) scale *= 10;
  return value / scale * scale;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 5) value /= 1024, ++unit;
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, kUnits[unit]);
  return text;
}

AvailableMemory available_memory(const std::string& root) {
  if (const char* text = std::getenv("LOOM_MEMORY_LIMIT_BYTES"); text != nullptr && *text != '\0') {
    const int64_t bytes = whole_number(text);
    LOOM_CHECK(bytes >= 1, "LOOM_MEMORY_LIMIT_BYTES: expected a number of bytes from 1 to ", kNoLimit, ", got '", text,
               "'");
    return {bytes, "LOOM_MEMORY_LIMIT_BYTES allows " + format_bytes(bytes)};
  }
  const int64_t kib = field(root + "/proc/meminfo", "MemAvailable");
  const int64_t machine = kib >= 0 && kib <= kNoLimit / 1024 ? kib * 1024 : kNoLimit;
  const int64_t container = left_in_cgroups(root);
  if (container < machine) return {container, "this container's memory limit leaves " + format_bytes(container)};
  if (machine == kNoLimit) return {kNoLimit, "this machine does not say how much memory it has"};
  return {machine, "this machine has " + format_bytes(machine) + " available"};
}

int processes_on_this_machine() {
  const char* text = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int64_t n = text == nullptr ? -1 : whole_number(text);
  return n >= 1 && n <= std::numeric_limits<int>::max() ? static_cast<int>(n) : 1;
}

void check_fits_in_memory(const MemoryDemand& d, const AvailableMemory& available) {
  if (available.bytes == kNoLimit) return;
  const auto usable = static_cast<int64_t>(kUsableShare * static_cast<double>(available.bytes));
  const auto needed = [&](int64_t value) {
    const int64_t one = d.bytes(value);
    return one > kNoLimit / d.copies ? kNoLimit : one * d.copies;
  };
  const int64_t need = needed(d.value);
  if (need <= usable) return;
  const auto spell = [&](int64_t value) { return d.spell ? d.spell(value) : std::to_string(value); };
  // The largest value that fits: the demand rises with the value, so bisect.
  int64_t lo = d.smallest, hi = d.value;
  if (needed(lo) > usable) {
    lo = -1;
  } else {
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (needed(mid) <= usable ? lo : hi) = mid;
    }
    lo = d.round_down ? d.round_down(lo) : round_to_two_digits(lo);
    lo = std::max(d.smallest, lo / d.multiple_of * d.multiple_of);
  }
  const std::string ranks =
      d.copies > 1 ? " (" + format_bytes(need / d.copies) + " for each of " + std::to_string(d.copies) + " " +
                            d.copies_are + ")"
                      : "";
  const std::string share = "; a run may plan on " + std::to_string(static_cast<int>(kUsableShare * 100)) + "% of it";
  if (lo < 0)
    LOOM_FAIL(d.flag, " ", spell(d.value), " needs about ", format_bytes(need), " ", d.what, ranks, "; ",
              available.where, share, ", and even ", d.flag, " ", spell(d.smallest), " needs ",
              format_bytes(needed(d.smallest)), d.otherwise.empty() ? "" : ": try " + d.otherwise);
  LOOM_FAIL(d.flag, " ", spell(d.value), " needs about ", format_bytes(need), " ", d.what, ranks, "; ",
            available.where, share, ": try ", d.flag, " ", spell(lo), " or less");
}

int64_t StepMemory::at(int64_t n) const {
  const double bytes = std::ceil(fixed + per_sample * static_cast<double>(n));
  return bytes >= static_cast<double>(kNoLimit) ? kNoLimit : static_cast<int64_t>(std::max(0.0, bytes));
}

MeasuringBatches measuring_batches(int64_t batch) {
  const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  const int64_t large = std::max<int64_t>(1, std::min(batch, std::max<int64_t>(32, 4 * threads)));
  return {std::max<int64_t>(1, large / 2), large};
}

StepMemory fit_step_memory(const MeasuringBatches& at, const std::function<double(int64_t)>& peak_at) {
  const double at_small = peak_at(at.small), at_large = at.large == at.small ? at_small : peak_at(at.large);
  StepMemory m;
  m.per_sample =
      at.large == at.small ? 0 : std::max(0.0, (at_large - at_small) / static_cast<double>(at.large - at.small));
  m.fixed = std::max(0.0, at_large - m.per_sample * static_cast<double>(at.large));
  return m;
}

StepMemory measure_step_memory(Device device, int64_t batch, const std::function<void(int64_t)>& step) {
  // The larger of the step's peak allocation and what it took from the system: the caching
  // allocator keeps a freed block for its size class only, so a step whose tensors come in many
  // sizes holds more than its peak (a third more for the Fashion-MNIST CNN).
  const auto peak_of = [&](int64_t n) {
    empty_cache(device);  // from an empty cache, what the step reserves is what it asked the system for
    reset_peak_memory_stats(device);
    const MemoryStats before = memory_stats(device);
    step(n);
    const MemoryStats after = memory_stats(device);
    empty_cache(device);
    return static_cast<double>(std::max(after.peak_allocated_bytes - before.allocated_bytes,
                                        after.reserved_bytes - before.reserved_bytes));
  };
  return fit_step_memory(measuring_batches(batch), peak_of);
}

}  // namespace loom
