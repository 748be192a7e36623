// run_program: every failure is one line on stderr and a status, and the
// out-of-memory hint ("try a smaller --batch-size") only where tensor memory
// ran out, never for a bad input that made a container ask for too much.
#include "examples/common/program.h"

#include <gtest/gtest.h>

#include <new>
#include <vector>

#include "examples/common/flags.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::examples {
namespace {

struct Outcome {
  int status = 0;
  std::string stderr_text;
};

Outcome run(const std::function<int()>& body) {
  ::testing::internal::CaptureStderr();
  const int status = run_program("prog", body);
  return {status, ::testing::internal::GetCapturedStderr()};
}

TEST(RunProgram, TensorMemoryRunningOutSuggestsASmallerBatch) {
  const Outcome o = run([] {
    empty({int64_t{1} << 50});  // 4 PiB of float32: the allocator's OutOfMemoryError
    return 0;
  });
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.stderr_text.find("prog: out of memory: failed to allocate"), std::string::npos) << o.stderr_text;
  EXPECT_NE(o.stderr_text.find("(try a smaller --batch-size or model)\n"), std::string::npos) << o.stderr_text;
}

TEST(RunProgram, BadAllocElsewhereDoesNotBlameTheBatch) {
  const Outcome o = run([]() -> int { throw std::bad_alloc(); });
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.stderr_text, "prog: out of memory (std::bad_alloc, outside tensor storage)\n");
}

TEST(RunProgram, ErrorsAndUsageErrorsAreOneLineWithTheirStatus) {
  Outcome o = run([]() -> int { LOOM_FAIL("checkpoint x: the header is not valid JSON"); });
  EXPECT_EQ(o.status, 1);
  EXPECT_EQ(o.stderr_text, "prog: checkpoint x: the header is not valid JSON\n");
  o = run([]() -> int { throw UsageError("--epochs: expected an integer"); });
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.stderr_text, "prog: --epochs: expected an integer\n");
}

}  // namespace
}  // namespace loom::examples
