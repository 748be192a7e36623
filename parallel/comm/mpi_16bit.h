// bfloat16 and float16 over MPI, which has no 16-bit floating-point types:
// loom describes them as a 2-byte type of its own and reduces them with its
// own operations (one set per format), which combine two values in float32 and round the result back
// to 16 bits (so a reduction over n ranks rounds n - 1 times, as NCCL's ring
// does, where the threads backend rounds once).
//
// The types and operations are made on first use, after MPI_Init, and freed
// by free_mpi_16bit() before MPI_Finalize. MPI is initialised with
// MPI_THREAD_MULTIPLE, so several communication threads may ask at once.
#pragma once

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include "parallel/comm/reduce_op.h"
#include "tensor/dtype.h"

namespace loom::parallel {

// The MPI type of a kBFloat16 or kFloat16 element.
MPI_Datatype mpi_16bit_type(DType dtype);

// The MPI operation for `op` on that type; ReduceOp::Avg is its sum (the
// caller divides by the group's size afterwards).
MPI_Op mpi_16bit_op(DType dtype, ReduceOp op);

// Frees the type and operations, if they were made (the MPI runtime calls it
// before MPI_Finalize, when no communication is left).
void free_mpi_16bit();

}  // namespace loom::parallel
