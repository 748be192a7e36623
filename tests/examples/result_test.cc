// The RESULT line is valid JSON whatever the numbers are, and says which were not finite.
#include "examples/common/result.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::examples {
namespace {

std::string printed(const nlohmann::ordered_json& fields) {
  ::testing::internal::CaptureStdout();
  print_result(fields);
  return ::testing::internal::GetCapturedStdout();
}

TEST(ResultTest, KeepsOrderAndSpacing) {
  EXPECT_EQ(printed({{"example", "x"}, {"epochs", 3}, {"test_accuracy", 0.5}}),
            "RESULT {\"example\": \"x\", \"epochs\": 3, \"test_accuracy\": 0.5}\n");
}

TEST(ResultTest, NonFiniteNumbersBecomeNullWithTheReason) {
  const std::string line = printed({{"example", "x"}, {"loss", NAN}, {"rate", INFINITY}, {"ok", 1.5}});
  EXPECT_EQ(line,
            "RESULT {\"example\": \"x\", \"loss\": null, \"rate\": null, \"ok\": 1.5, "
            "\"not_finite\": {\"loss\": \"nan\", \"rate\": \"inf\"}}\n");
  const nlohmann::json parsed = nlohmann::json::parse(line.substr(7));  // valid JSON
  EXPECT_TRUE(parsed["loss"].is_null());
}

}  // namespace
}  // namespace loom::examples
