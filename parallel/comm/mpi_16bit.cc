#include "parallel/comm/mpi_16bit.h"

#include <algorithm>
#include <mutex>

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

MPI_Op make_op(MPI_User_function* fn) {
  MPI_Op op;
  LOOM_CHECK(MPI_Op_create(fn, /*commute=*/1, &op) == MPI_SUCCESS,
             "mpi backend: could not make a reduction for 16-bit floats");
  return op;
}

// Sum, max and min for one 16-bit format.
struct Ops {
  MPI_Op sum, max, min;
  MPI_Op get(ReduceOp op) const {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: return sum;
      case ReduceOp::Max: return max;
      case ReduceOp::Min: return min;
    }
    LOOM_FAIL("mpi backend: unsupported reduce op");
  }
  void free() {
    for (MPI_Op* op : {&sum, &max, &min}) MPI_Op_free(op);
  }
};

template <typename Half>
Ops make_ops() {
  return {make_op(&combine<Half, ReduceOp::Sum>), make_op(&combine<Half, ReduceOp::Max>),
          make_op(&combine<Half, ReduceOp::Min>)};
}

// What has been made so far, made on first use (MPI is initialised by then).
struct Registry {
  std::mutex mutex;
  bool made = false;
  MPI_Datatype two_bytes = MPI_DATATYPE_NULL;  // the operation says which format
  Ops bfloat16{}, float16{};

  void make_once() {
    if (made) return;
    LOOM_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &two_bytes) == MPI_SUCCESS && MPI_Type_commit(&two_bytes) == MPI_SUCCESS,
               "mpi backend: could not make the 2-byte type for 16-bit floats");
    bfloat16 = make_ops<BFloat16>();
    float16 = make_ops<Float16>();
    made = true;
  }
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: the runtime frees what it holds before MPI_Finalize
  return *r;
}

}  // namespace

MPI_Datatype mpi_16bit_type(DType dtype) {
  LOOM_INTERNAL_ASSERT(is_16bit_floating(dtype), "mpi_16bit_type: ", dtype, " is not a 16-bit float");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.make_once();
  return r.two_bytes;
}

MPI_Op mpi_16bit_op(DType dtype, ReduceOp op) {
  LOOM_INTERNAL_ASSERT(is_16bit_floating(dtype), "mpi_16bit_op: ", dtype, " is not a 16-bit float");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.make_once();
  return (dtype == kBFloat16 ? r.bfloat16 : r.float16).get(op);
}

void free_mpi_16bit() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.made) return;
  MPI_Type_free(&r.two_bytes);
  r.bfloat16.free();
  r.float16.free();
  r.made = false;
}

}  // namespace loom::parallel
