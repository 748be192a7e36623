// loom::Error and the checks that throw it.
//
// User errors (bad shapes, dtypes, devices, indices, files) throw loom::Error
// with a message that names the operation and the facts:
//
//   LOOM_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got shape ", a.shape());
//
// LOOM_INTERNAL_ASSERT guards loom's own invariants; it also throws (library
// code never aborts) and adds file:line, since a failure there is a loom bug.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_error(const std::string& message);
[[noreturn]] void throw_internal(const char* file, int line, const char* condition,
                                 const std::string& message);

}  // namespace detail
}  // namespace loom

#define LOOM_CHECK(cond, ...)                                               \
  do {                                                                      \
    if (__builtin_expect(!(cond), 0))                                       \
      ::loom::detail::throw_error(::loom::detail::concat(__VA_ARGS__));     \
  } while (0)

#define LOOM_INTERNAL_ASSERT(cond, ...)                                     \
  do {                                                                      \
    if (__builtin_expect(!(cond), 0))                                       \
      ::loom::detail::throw_internal(__FILE__, __LINE__, #cond,             \
                                     ::loom::detail::concat("", ##__VA_ARGS__)); \
  } while (0)

#define LOOM_FAIL(...) ::loom::detail::throw_error(::loom::detail::concat(__VA_ARGS__))
