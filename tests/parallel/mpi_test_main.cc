// main() of the GoogleTest binaries that run under mpirun, one process per
// rank (see mpi_test.bzl). Every rank runs every test in the same order.
// Each rank writes its own XML into $LOOM_RANK_XML_DIR, which
// mpi_test_runner.sh merges; ranks other than 0 print only their failures, so
// that the log reads as one run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "parallel/comm/init.h"
#include "tests/parallel/mpi_world.h"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  using loom::parallel::testing::mpi_world;
  loom::parallel::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);  // generous: a failing test should not hang for long
  mpi_world() = loom::parallel::init(argc, argv, options);
  const int rank = mpi_world()->rank();

  // Before InitGoogleTest, which would otherwise let every rank write to
  // Bazel's XML_OUTPUT_FILE.
  if (const char* dir = std::getenv("LOOM_RANK_XML_DIR"))
    ::testing::GTEST_FLAG(output) = std::string("xml:") + dir + "/rank" + std::to_string(rank) + ".xml";
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int status = RUN_ALL_TESTS();
  mpi_world().reset();  // MPI_Finalize follows at exit
  return status;
}
