// Running part of a test with a chosen number of OpenMP threads.
//
//   const auto one = testing::on_omp_threads(1, [&] { return values(sum(x, {0})); });
//
// OpenMP's thread count is a per-thread setting: fn runs on a new thread of
// its own with `threads` of them, so the caller's count is never changed and
// nothing needs restoring, whatever fn does. Its result (or exception) is
// handed back.
#pragma once

#include <omp.h>

#include <exception>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

namespace loom::testing {

template <typename F>
auto on_omp_threads(int threads, F&& fn) {
  using Result = std::invoke_result_t<F&>;
  std::exception_ptr error;
  if constexpr (std::is_void_v<Result>) {
    std::thread([&] {
      omp_set_num_threads(threads);
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
    }).join();
    if (error) std::rethrow_exception(error);
  } else {
    std::optional<Result> result;
    std::thread([&] {
      omp_set_num_threads(threads);
      try {
        result.emplace(fn());
      } catch (...) {
        error = std::current_exception();
      }
    }).join();
    if (error) std::rethrow_exception(error);
    return std::move(*result);
  }
}

}  // namespace loom::testing
