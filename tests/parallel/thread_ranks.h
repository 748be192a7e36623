// Runs a function on every rank of a fresh ThreadGroup, one thread per rank,
// as a multi-process job would run main() once per process.
//
//   run_ranks(3, [](ProcessGroup& pg) { pg.barrier()->wait(); });
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/thread_group.h"

namespace loom::parallel::testing {

// Generous, so that no test depends on timing; only the timeout tests use short ones.
inline ProcessGroupOptions test_options() {
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);
  return options;
}

// Runs body(rank, that rank's group) on one thread per rank. An exception
// escaping body() on any rank fails the test, naming the rank.
inline void run_rank_threads(int n, const std::function<void(int, const std::shared_ptr<ProcessGroup>&)>& body,
                             ProcessGroupOptions options = test_options()) {
  auto groups = ThreadGroup::create(n, options);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r, groups[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " threw";
}

inline void run_ranks(int n, const std::function<void(ProcessGroup&)>& body,
                      ProcessGroupOptions options = test_options()) {
  run_rank_threads(
      n, [&](int, const std::shared_ptr<ProcessGroup>& group) { body(*group); }, options);
}

// Runs body(group of rank r, what prepare(r) made) on one thread per rank;
// prepare runs first, on this thread, for each rank (it may seed the global
// generator, which the rank threads must not race on).
template <typename Prepared>
void run_prepared_ranks(int n, const std::function<Prepared(int rank)>& prepare,
                        const std::function<void(const std::shared_ptr<ProcessGroup>&, Prepared&)>& body) {
  std::vector<Prepared> prepared;
  for (int r = 0; r < n; ++r) prepared.push_back(prepare(r));
  run_rank_threads(n, [&](int r, const std::shared_ptr<ProcessGroup>& group) { body(group, prepared[r]); });
}

}  // namespace loom::parallel::testing
