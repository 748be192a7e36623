// The examples' flags: strict numbers with the flag named in the error,
// --help, and settings by scope (what ranks compare and a resume checks).
#include "examples/common/flags.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::examples {
namespace {

// Parses `args` (after the program name) and returns the UsageError's message, or "" if none.
std::string parse(Flags& flags, std::vector<std::string> args) {
  args.insert(args.begin(), "program");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    flags.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

struct Values {
  int epochs = 5;
  int64_t steps = 0;
  uint64_t seed = 0;
  double lr = 0.002;
  std::string device = "cpu";
  bool resume = false;
};

void define(Flags& flags, Values& v) {
  flags.add("--epochs", v.epochs, "", Scope::Run, integer_in(1, 100));
  flags.add("--steps", v.steps, "", Scope::Run);
  flags.add("--seed", v.seed, "", Scope::Run);
  flags.add("--lr", v.lr, "", Scope::Run, number_in(0, 10));
  flags.add("--device", v.device, "", Scope::Rank);
  flags.add_switch("--resume", v.resume, "", Scope::Job);
}

TEST(FlagsTest, AcceptsValidValues) {
  Values v;
  Flags flags("test");
  define(flags, v);
  EXPECT_EQ(parse(flags, {"--epochs", "7", "--steps", "-3", "--seed", "18446744073709551615", "--lr", "1e-3",
                          "--device", "cuda:1", "--resume"}),
            "");
  EXPECT_EQ(v.epochs, 7);
  EXPECT_EQ(v.steps, -3);
  EXPECT_EQ(v.seed, UINT64_MAX);
  EXPECT_EQ(v.lr, 1e-3);
  EXPECT_EQ(v.device, "cuda:1");
  EXPECT_TRUE(v.resume);
}

TEST(FlagsTest, RejectsWhatCli11AloneWouldWrapSaturateOrAccept) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--epochs", "0"}, "--epochs: expected an integer from 1 to 100, got '0'"},
      {{"--epochs", "101"}, "--epochs: expected an integer from 1 to 100, got '101'"},
      {{"--epochs", "5x"}, "got '5x'"},
      {{"--epochs", " 5"}, "got ' 5'"},
      {{"--epochs", ""}, "got ''"},
      {{"--seed", "-1"}, "--seed: expected an integer from 0 to 18446744073709551615, got '-1'"},
      {{"--seed", "18446744073709551616"}, "got '18446744073709551616'"},
      {{"--steps", "99999999999999999999"}, "--steps: expected an integer from -9223372036854775808"},
      {{"--lr", "nan"}, "--lr: expected a finite number from 0 to 10, got 'nan'"},
      {{"--lr", "inf"}, "got 'inf'"},
      {{"--lr", "-0.1"}, "got '-0.1'"},
      {{"--lr", "1e400"}, "got '1e400'"},
      {{"--lr", "0.1.2"}, "got '0.1.2'"},
      {{"--bogus"}, "--bogus"},
      {{"--epochs"}, "--epochs"},
  };
  for (const Case& c : cases) {
    Values v;
    Flags flags("test");
  define(flags, v);
    const std::string error = parse(flags, c.args);
    EXPECT_NE(error.find(c.message), std::string::npos) << c.args[0] << ": got \"" << error << "\"";
    EXPECT_NE(error.find("see --help"), std::string::npos);
  }
}

TEST(FlagsTest, ListsOfNames) {
  std::string models = "cnn";
  Flags flags("test");
  flags.add("--models", models, "", Scope::Run, list_of({"cnn", "gpt"}));
  EXPECT_EQ(parse(flags, {"--models", "gpt,cnn"}), "");
  EXPECT_EQ(models, "gpt,cnn");
  for (const std::string bad : {"cnn,,gpt", "cnn,", "lstm", ""}) {
    Flags other("test");
    other.add("--models", models, "", Scope::Run, list_of({"cnn", "gpt"}));
    EXPECT_NE(parse(other, {"--models", bad}).find("--models: expected a comma-separated list of cnn, gpt, got '" + bad + "'"),
              std::string::npos)
        << bad;
  }
}

TEST(FlagsTest, DeviceListsAreUsageErrorsNamingTheFlagAndTheDevice) {
  std::string devices;
  Flags flags("test");
  flags.add("--devices", devices, "", Scope::Job, device_list(3));
  ASSERT_EQ(parse(flags, {"--devices", "cpu,cuda:1,cuda:127"}), "");
  EXPECT_EQ(parse_device_list(devices, 3), (std::vector<Device>{Device::cpu(), Device::cuda(1), Device::cuda(127)}));
  // An empty item is a device that is not there, never one quietly left out.
  for (const std::string bad : {",", "cpu,", ",cpu", "cpu,,cpu", ""}) {
    Flags again("test");
    again.add("--devices", devices, "", Scope::Job, device_list(3));
    EXPECT_EQ(parse(again, {"--devices", bad}), "--devices: invalid device '': expected cpu, cuda or cuda:N (see --help)")
        << bad;
  }
  Flags index("test");
  index.add("--devices", devices, "", Scope::Job, device_list(3));
  EXPECT_EQ(parse(index, {"--devices", "cpu,cuda:99999999999"}),
            "--devices: invalid device 'cuda:99999999999': a CUDA device index is from 0 to 127 (see --help)");
  Flags many("test");
  many.add("--devices", devices, "", Scope::Job, device_list(3));
  EXPECT_EQ(parse(many, {"--devices", "cpu,cpu,cpu,cpu"}), "--devices: a list of at most 3 devices, got 4 (see --help)");
}

TEST(FlagsTest, IndexListsReadEveryItemAndRejectAnEmptyOne) {
  std::string cuts;
  Flags flags("test");
  flags.add("--stage-boundaries", cuts, "", Scope::Job, index_list());
  ASSERT_EQ(parse(flags, {"--stage-boundaries", "3,10,999999"}), "");
  EXPECT_EQ(parse_index_list(cuts), (std::vector<int>{3, 10, 999999}));
  EXPECT_EQ(parse_index_list(""), std::vector<int>{});
  for (const std::string bad : {"3,", ",3", "3,,4", "-1", "1000000", "2.5", "x"}) {
    Flags again("test");
    again.add("--stage-boundaries", cuts, "", Scope::Job, index_list());
    const std::string item = bad == "3," || bad == ",3" || bad == "3,,4" ? "" : bad;
    EXPECT_EQ(parse(again, {"--stage-boundaries", bad}),
              "--stage-boundaries: '" + item + "' is not an index (0 to 999999) (see --help)")
        << bad;
  }
}

TEST(FlagsTest, HelpPrintsAndAsksToExit) {
  Values v;
  Flags flags("test");
  define(flags, v);
  std::vector<std::string> args = {"program", "--help"};
  std::vector<char*> argv = {args[0].data(), args[1].data()};
  EXPECT_THROW(flags.parse(2, argv.data()), ExitAfterHelp);
}

TEST(FlagsTest, SettingsByScopeIncludeDefaultsInTheirShortestForm) {
  Values v;
  Flags flags("test");
  define(flags, v);
  ASSERT_EQ(parse(flags, {"--lr", "0.1", "--device", "cuda:0"}), "");
  EXPECT_EQ(flags.settings({Scope::Run}),
            (std::map<std::string, std::string>{{"--epochs", "5"}, {"--lr", "0.1"}, {"--seed", "0"}, {"--steps", "0"}}));
  EXPECT_EQ(flags.settings({Scope::Job}), (std::map<std::string, std::string>{{"--resume", "off"}}));
  EXPECT_EQ(flags.settings({Scope::Rank}), (std::map<std::string, std::string>{{"--device", "cuda:0"}}));
  // 0.1 and 0.1000000000000001 are different runs: the text tells them apart.
  Values w;
  Flags other("test");
  define(other, w);
  ASSERT_EQ(parse(other, {"--lr", "0.1000000000000001"}), "");
  EXPECT_NE(other.settings({Scope::Run}).at("--lr"), flags.settings({Scope::Run}).at("--lr"));
}

}  // namespace
}  // namespace loom::examples
