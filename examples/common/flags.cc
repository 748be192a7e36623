#include "examples/common/flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tensor/device.h"
#include "tensor/error.h"

namespace loom::examples {

CLI::Validator number_in(double lo, double hi) {
  std::ostringstream range;
  range << "a finite number from " << lo << " to " << hi;
  return CLI::Validator(
      [lo, hi, range = range.str()](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = text.empty() ? NAN : std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(value) || value < lo || value > hi)
          return "expected " + range + ", got '" + text + "'";
        return "";
      },
      range.str());
}

CLI::Validator list_of(const std::vector<std::string>& allowed) {
  std::string names;
  for (const std::string& a : allowed) names += (names.empty() ? "" : ", ") + a;
  const std::string expected = "a comma-separated list of " + names;
  return CLI::Validator(
      [allowed, expected](std::string& text) -> std::string {
        bool ok = !text.empty() && text.back() != ',';
        std::stringstream list(text);
        for (std::string name; ok && std::getline(list, name, ',');)
          ok = std::find(allowed.begin(), allowed.end(), name) != allowed.end();
        return ok ? "" : "expected " + expected + ", got '" + text + "'";
      },
      expected);
}

CLI::Validator device_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          Device::parse(text);
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "cpu, cuda or cuda:N");
}

std::vector<Device> parse_device_list(const std::string& text, size_t most) {
  const size_t items = std::count(text.begin(), text.end(), ',') + 1;
  LOOM_CHECK(items <= most, "a list of at most ", most, " devices, got ", items);
  std::vector<Device> out;
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    out.push_back(Device::parse(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// Checked while the command line is parsed, so that a bad list is a usage
// error (status 2) naming the flag, as a bad --device is.
CLI::Validator device_list(size_t most) {
  return CLI::Validator(
      [most](std::string& text) -> std::string {
        try {
          parse_device_list(text, most);
          return "";
        } catch (const Error& e) {
          return e.what();
        }
      },
      "a comma-separated list of devices");
}

std::vector<int> parse_index_list(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  std::stringstream items(text + ",");  // so that "3," ends in an empty item, which is an error
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty() || item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos)
      throw UsageError("'" + item + "' is not an index (0 to 999999)");
    out.push_back(std::stoi(item));
  }
  return out;
}

CLI::Validator index_list() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_index_list(text);
          return "";
        } catch (const UsageError& e) {
          return e.what();
        }
      },
      "a comma-separated list of indices");
}

Flags::Flags(const std::string& description) : app_(description) {}

CLI::Option* Flags::add_switch(const std::string& name, bool& value, const std::string& description, Scope scope) {
  remember(name, scope, [&value] { return value ? std::string("on") : std::string("off"); });
  return app_.add_flag(name, value, description);
}

void Flags::remember(const std::string& name, Scope scope, std::function<std::string()> text) {
  entries_.push_back({name, scope, std::move(text)});
}

void Flags::parse(int argc, char** argv) {
  try {
    app_.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app_.help().c_str());
    throw ExitAfterHelp{};
  } catch (const CLI::CallForAllHelp&) {
    std::printf("%s", app_.help("", CLI::AppFormatMode::All).c_str());
    throw ExitAfterHelp{};
  } catch (const CLI::ParseError& e) {
    throw UsageError(std::string(e.what()) + " (see --help)");
  }
}

std::map<std::string, std::string> Flags::settings(std::initializer_list<Scope> scopes) const {
  std::map<std::string, std::string> out;
  for (const Entry& e : entries_)
    for (Scope s : scopes)
      if (e.scope == s) out[e.name] = e.text();
  return out;
}

}  // namespace loom::examples
