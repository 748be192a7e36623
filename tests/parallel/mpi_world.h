// The process group of a test binary that runs under mpirun (set up by
// mpi_test_main.cc before the tests start).
//
//   TEST(Mpi, AllReduce) { check_all_reduce(*mpi_world()); }
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"

namespace loom::parallel::testing {

inline std::shared_ptr<ProcessGroup>& mpi_world() {
  static std::shared_ptr<ProcessGroup> world;
  return world;
}

}  // namespace loom::parallel::testing
