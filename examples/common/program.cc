#include "examples/common/program.h"

#include <cstdio>
#include <cstdlib>
#include <new>

#include "examples/common/flags.h"
#include "tensor/error.h"

namespace loom::examples {
namespace {

// "name (rank N)" when an MPI launcher started this process as one of several.
std::string label(const std::string& name) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMIX_RANK");
  return rank == nullptr ? name : name + " (rank " + rank + ")";
}

}  // namespace

int run_program(const std::string& name, const std::function<int()>& body,
                const std::function<void(const std::string& why)>& on_failure) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string why;
  int status = 1;
  try {
    status = body();
    if (status == 0 || status == kExitPreempted) return status;  // every rank stopped alike: nothing to abandon
    if (on_failure) on_failure(label(name) + ": exit status " + std::to_string(status));  // it said why
    return status;
  } catch (const ExitAfterHelp&) {
    return 0;
  } catch (const UsageError& e) {
    why = e.what();
    status = 2;
  } catch (const OutOfMemoryError& e) {  // tensor memory: what a smaller batch or model helps with
    why = std::string(e.what()) + " (try a smaller --batch-size or model)";
  } catch (const Error& e) {
    why = e.what();
  } catch (const std::bad_alloc&) {
    // Not tensor memory: a container sized by something read (readers bound what a file may make them
    // allocate, so this is the machine, not the batch).
    why = "out of memory (std::bad_alloc, outside tensor storage)";
  } catch (const std::exception& e) {
    why = std::string("unexpected error: ") + e.what();
  } catch (...) {
    why = "unexpected error of an unknown type";
  }
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %s\n", label(name).c_str(), why.c_str());
  if (on_failure) on_failure(label(name) + ": " + why);
  return status;
}

}  // namespace loom::examples
