#include "parallel/comm/agreement.h"

#include <cstring>
#include <set>

#include "tensor/creation.h"

namespace loom::parallel {
namespace {

using Settings = std::map<std::string, std::string>;

// "name\0value\0" per setting, in name order.
std::string serialize(const Settings& settings) {
  std::string out;
  for (const auto& [name, value] : settings) {
    out.append(name).push_back('\0');
    out.append(value).push_back('\0');
  }
  return out;
}

Settings deserialize(const Tensor& bytes) {
  const std::string text(static_cast<const char*>(bytes.raw_data()), static_cast<size_t>(bytes.numel()));
  Settings out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t name_end = text.find('\0', at), value_end = text.find('\0', name_end + 1);
    LOOM_INTERNAL_ASSERT(value_end != std::string::npos, "malformed settings from a peer");
    out[text.substr(at, name_end - at)] = text.substr(name_end + 1, value_end - name_end - 1);
    at = value_end + 1;
  }
  return out;
}

}  // namespace

void check_ranks_agree(ProcessGroup& group, const Settings& settings) {
  if (group.size() == 1) return;
  const std::string mine = serialize(settings);
  Tensor size = full({1}, static_cast<double>(mine.size()), {.dtype = kInt64});
  Tensor sizes = empty({group.size()}, {.dtype = kInt64});
  group.all_gather(sizes, size)->wait();
  Tensor bytes = empty({static_cast<int64_t>(mine.size())}, {.dtype = kUInt8});
  if (!mine.empty()) std::memcpy(bytes.raw_data(), mine.data(), mine.size());
  std::vector<Tensor> all;
  for (int r = 0; r < group.size(); ++r) all.push_back(empty({sizes.data_ptr<int64_t>()[r]}, {.dtype = kUInt8}));
  group.all_gather(all, bytes)->wait();

  std::vector<Settings> per_rank;
  std::set<std::string> names;
  for (const Tensor& t : all) {
    per_rank.push_back(deserialize(t));
    for (const auto& [name, value] : per_rank.back()) names.insert(name);
  }
  std::string differences;
  for (const std::string& name : names) {
    std::string values;
    bool differ = false;
    for (int r = 0; r < group.size(); ++r) {
      auto it = per_rank[r].find(name);
      const std::string value = it == per_rank[r].end() ? "(not set)" : it->second;
      auto first = per_rank[0].find(name);
      differ |= value != (first == per_rank[0].end() ? "(not set)" : first->second);
      values += detail::concat(r ? ", " : "", "rank ", r, ": ", value.empty() ? "\"\"" : value);
    }
    if (differ) differences += (differences.empty() ? "" : "; ") + name + " (" + values + ")";
  }
  LOOM_CHECK(differences.empty(), "the ranks were started with different settings: ", differences,
             "; start every rank with the same values");
}

}  // namespace loom::parallel
