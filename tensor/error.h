// loom::Error and the checks that throw it.
//
// User errors (bad shapes, dtypes, devices, indices, files) throw loom::Error
// with a message that names the operation and the facts:
//
//   LOOM_CHECK(a.dim() == 2, "matmul: expected a 2-D tensor, got shape ", a.shape());
//
// LOOM_INTERNAL_ASSERT guards loom's own invariants; it also throws (library
// code never aborts) and adds file:line, since a failure there is a loom bug.
// The allocators throw OutOfMemoryError, a loom::Error, through
// LOOM_FAIL_OUT_OF_MEMORY, so a program can tell tensor memory running out
// from a bad input.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Tensor memory the device could not give (PyTorch's torch.OutOfMemoryError).
// Only the allocators throw it: a program may then suggest a smaller batch,
// which is no help for a std::bad_alloc from, say, a damaged file's sizes.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_error(const std::string& message);
[[noreturn]] void throw_out_of_memory(const std::string& message);
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

#define LOOM_FAIL_OUT_OF_MEMORY(...) ::loom::detail::throw_out_of_memory(::loom::detail::concat(__VA_ARGS__))
