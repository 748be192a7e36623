#include "parallel/comm/mpi_16bit.h"

#include <algorithm>

#include "tensor/error.h"

namespace loom::parallel {
namespace {

// inout[i] = in[i] (op) inout[i], computed in float32 and rounded once.
template <typename Half, ReduceOp kOp>
void combine(void* in, void* inout, int* len, MPI_Datatype*) {
  const Half* a = static_cast<const Half*>(in);
  Half* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = a[i], y = b[i];
    b[i] = Half(kOp == ReduceOp::Max ? std::max(x, y) : kOp == ReduceOp::Min ? std::min(x, y) : x + y);
  }
}

MPI_Datatype make_type() {
  MPI_Datatype type;
  LOOM_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &type) == MPI_SUCCESS && MPI_Type_commit(&type) == MPI_SUCCESS,
             "mpi backend: could not make the 2-byte type for 16-bit floats");
  return type;
}

template <typename Half>
struct Ops {
  MPI_Op sum, max, min;
  Ops() {
    auto make = [](MPI_User_function* fn) {
      MPI_Op op;
      LOOM_CHECK(MPI_Op_create(fn, /*commute=*/1, &op) == MPI_SUCCESS,
                 "mpi backend: could not make a reduction for 16-bit floats");
      return op;
    };
    sum = make(&combine<Half, ReduceOp::Sum>);
    max = make(&combine<Half, ReduceOp::Max>);
    min = make(&combine<Half, ReduceOp::Min>);
  }
  MPI_Op get(ReduceOp op) const {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return sum;
      case ReduceOp::Max: return max;
      case ReduceOp::Min: return min;
    }
    LOOM_FAIL("mpi backend: unsupported reduce op");
  }
};

}  // namespace

MPI_Datatype mpi_16bit_type(DType dtype) {
  static const MPI_Datatype two_bytes = make_type();  // the operation says which format
  LOOM_INTERNAL_ASSERT(is_16bit_floating(dtype), "mpi_16bit_type: ", dtype, " is not a 16-bit float");
  return two_bytes;
}

MPI_Op mpi_16bit_op(DType dtype, ReduceOp op) {
  static const Ops<BFloat16> bfloat16;
  static const Ops<Float16> float16;
  LOOM_INTERNAL_ASSERT(is_16bit_floating(dtype), "mpi_16bit_op: ", dtype, " is not a 16-bit float");
  return dtype == kBFloat16 ? bfloat16.get(op) : float16.get(op);
}

}  // namespace loom::parallel
