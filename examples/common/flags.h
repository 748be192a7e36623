// Command-line flags for the examples: CLI11, plus what its defaults lack.
// Numbers are parsed strictly (CLI11 alone turns --seed -1 into 2^64 - 1 and
// saturates out-of-range values), ranges are named in the error, and every
// flag has a scope, so that ranks can check that they were started alike and
// a resumed run that it continues the same training.
//
//   Flags flags("Train a CNN on Fashion-MNIST");
//   flags.add("--epochs", epochs, "passes over the data", Scope::Run, integer_in(1, 10000));
//   flags.parse(argc, argv);     // --help: prints and exits; a bad value: UsageError naming the flag
//   flags.settings({Scope::Run}) // {"--epochs": "5", ...}: for the checkpoint, and for the ranks to compare
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tensor/device.h"

namespace loom::examples {

enum class Scope {
  Run,   // defines the training run: the same on every rank, and when resuming
  Job,   // the same on every rank (how the job trains); free to change on resume
  Rank,  // may differ from rank to rank (files, device, threads, logging)
};

// A wrong command line: run_program prints it with the program's name and exits with status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --help (or --version): the text is printed; run_program exits with status 0.
struct ExitAfterHelp {};

// Validators: an integer of type T from lo to hi, and a finite number from lo to hi.
template <typename T>
CLI::Validator integer_in(T lo, T hi) {
  std::ostringstream range;
  range << "an integer from " << +lo << " to " << +hi;
  return CLI::Validator(
      [lo, hi, range = range.str()](std::string& text) -> std::string {
        T value{};
        const char* end = text.data() + text.size();
        auto [stop, error] = std::from_chars(text.data(), end, value);
        if (text.empty() || error != std::errc() || stop != end || value < lo || value > hi)
          return "expected " + range + ", got '" + text + "'";
        return "";
      },
      range.str());
}
CLI::Validator number_in(double lo, double hi);
// A comma-separated, non-empty list of names from `allowed` ("single,ddp").
CLI::Validator list_of(const std::vector<std::string>& allowed);
// A device: cpu, cuda or cuda:N (whether that GPU exists is checked later).
CLI::Validator device_name();
// A comma-separated list of 1 to `most` devices ("cuda:0,cuda:1"); an empty
// item (",", "cuda:0,") is an invalid device, not one left out.
std::vector<Device> parse_device_list(const std::string& text, size_t most);
CLI::Validator device_list(size_t most);
// A comma-separated list of indices from 0 to 999999 ("3" or "2,5"); empty text is an empty list.
std::vector<int> parse_index_list(const std::string& text);
CLI::Validator index_list();

class Flags {
 public:
  explicit Flags(const std::string& description);

  // An option with a value; integers are checked by `check` or, without one,
  // against their type's range; numbers must be finite.
  template <typename T>
  CLI::Option* add(const std::string& name, T& value, const std::string& description, Scope scope,
                   CLI::Validator check = {}) {
    CLI::Option* option = app_.add_option(name, value, description)->capture_default_str();
    if constexpr (std::is_integral_v<T>) {
      if (check.get_description().empty())
        check = integer_in<T>(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    } else if constexpr (std::is_floating_point_v<T>) {
      if (check.get_description().empty())
        check = number_in(-std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
    }
    if (!check.get_description().empty()) option->check(check);
    remember(name, scope, [&value] { return as_text(value); });
    return option;
  }
  // An on/off switch.
  CLI::Option* add_switch(const std::string& name, bool& value, const std::string& description, Scope scope);

  // Parses the command line: throws ExitAfterHelp after printing --help, and
  // UsageError naming the flag for anything wrong.
  void parse(int argc, char** argv);

  // The flags of the given scopes, as name -> value (after parsing; defaults included).
  std::map<std::string, std::string> settings(std::initializer_list<Scope> scopes) const;

  CLI::App& app() { return app_; }

 private:
  template <typename T>
  static std::string as_text(const T& value) {
    if constexpr (std::is_arithmetic_v<T>) {
      char text[64];  // the shortest text that reads back as the same value
      return std::string(text, std::to_chars(text, text + sizeof(text), value).ptr);
    } else {
      return value;
    }
  }
  void remember(const std::string& name, Scope scope, std::function<std::string()> text);
  struct Entry {
    std::string name;
    Scope scope;
    std::function<std::string()> text;
  };
  CLI::App app_;
  std::vector<Entry> entries_;
};

}  // namespace loom::examples
