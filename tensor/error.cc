#include "tensor/error.h"

namespace loom::detail {

void throw_error(const std::string& message) { throw Error(message); }

void throw_out_of_memory(const std::string& message) { throw OutOfMemoryError(message); }

void throw_internal(const char* file, int line, const char* condition,
                    const std::string& message) {
  throw Error(concat("internal error at ", file, ":", line, ": ", condition,
                     message.empty() ? "" : ": ", message,
                     " (this is a bug in loom; please report it)"));
}

}  // namespace loom::detail
