#include "examples/common/result.h"

#include <cmath>
#include <cstdio>

namespace loom::examples {
namespace {

// JSON spaced as Python's json.dumps writes it, for people reading logs.
std::string spaced(const nlohmann::ordered_json& value) {
  if (!value.is_object()) return value.dump();
  std::string out;
  for (const auto& [key, item] : value.items())
    out += (out.empty() ? "" : ", ") + nlohmann::ordered_json(key).dump() + ": " + spaced(item);
  return "{" + out + "}";
}

}  // namespace

void print_result(nlohmann::ordered_json fields) {
  nlohmann::ordered_json not_finite = nlohmann::ordered_json::object();
  for (auto& [key, value] : fields.items()) {
    if (!value.is_number_float() || std::isfinite(value.get<double>())) continue;
    const double x = value.get<double>();
    not_finite[key] = std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
    value = nullptr;
  }
  if (!not_finite.empty()) fields["not_finite"] = not_finite;
  std::printf("RESULT %s\n", spaced(fields).c_str());
}

}  // namespace loom::examples
