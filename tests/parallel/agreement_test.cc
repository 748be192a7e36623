// check_ranks_agree: ranks started with the same settings pass; with
// different ones, every rank gets the same error naming each differing
// setting and every rank's value.
#include "parallel/comm/agreement.h"

#include <gtest/gtest.h>

#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

using testing::run_rank_threads;

TEST(AgreementTest, EqualSettingsPass) {
  run_rank_threads(3, [](int, const std::shared_ptr<ProcessGroup>& group) {
    check_ranks_agree(*group, {{"--lr", "0.001"}, {"--epochs", "5"}, {"--empty", ""}});
  });
}

TEST(AgreementTest, EveryRankNamesEachDifferenceWithAllValues) {
  std::vector<std::string> errors(3);
  run_rank_threads(3, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    std::map<std::string, std::string> settings{{"--epochs", "5"}, {"--lr", rank == 1 ? "0.01" : "0.001"},
                                                 {"--schedule", rank == 2 ? "gpipe" : "1f1b"}};
    if (rank == 2) settings["--extra"] = "x";  // a setting only one rank has
    try {
      check_ranks_agree(*group, settings);
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  const std::string expected =
      "the ranks were started with different settings: --extra (rank 0: (not set), rank 1: (not set), rank 2: x); "
      "--lr (rank 0: 0.001, rank 1: 0.01, rank 2: 0.001); --schedule (rank 0: 1f1b, rank 1: 1f1b, rank 2: gpipe); "
      "start every rank with the same values";
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], expected) << "rank " << r;
}

TEST(AgreementTest, OneRankNeedsNoExchange) {
  run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) {
    check_ranks_agree(*group, {{"--lr", "1"}});
    EXPECT_EQ(group->stats().ops, 0);
  });
}

}  // namespace
}  // namespace loom::parallel
