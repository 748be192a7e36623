// Out-of-range indices found inside CUDA kernels, reported as loom::Error at
// the next synchronising call.
//
// A kernel cannot throw, and checking every index on the host first would cost
// a device-to-host copy (a synchronisation) per indexing op. So the indexing
// kernels (index_select, index_add, gather, scatter_add) check each index as
// they use it; the first thread that meets a bad one records the op, the
// index, the dim and its size, and every bad position is skipped. The host
// looks at the record whenever it waits for the device anyway (synchronize(),
// copies to the host, item(), Stream/Event::synchronize) and throws:
//
//   index_select: index 7 is out of range for dimension 0 of size 5 (found by a
//   CUDA kernel on cuda:0 and reported at the next synchronising call)
//
// The output of the failing op is then partly written; as with any error, do
// not use it.
#pragma once

#include <cstdint>

namespace loom::cuda {

enum class IndexOpCode : int { IndexSelect = 1, IndexAdd, Gather, ScatterAdd };

// Written by the first failing thread into page-locked host memory that the
// device can write directly (mapped), so that checking costs no copy.
struct IndexErrorRecord {
  int op;
  int dim;
  long long index;
  long long size;
  int set;  // written last
};

// What a kernel needs to report: a device-memory word that elects the first
// failing thread, and the mapped record.
struct IndexErrorSlot {
  int* claim;
  IndexErrorRecord* record;
};

// The slot of cuda:device, created at first use.
IndexErrorSlot index_error_slot(int device);
// Throws the recorded error of cuda:device, if any, and clears it. Call after
// a host wait, when the kernels before it have finished.
void check_index_errors(int device);

#ifdef __CUDACC__
__device__ inline void report_bad_index(IndexErrorSlot slot, IndexOpCode op, int dim, int64_t index,
                                        int64_t size) {
  if (atomicCAS(slot.claim, 0, 1) == 0) {
    slot.record->op = static_cast<int>(op);
    slot.record->dim = dim;
    slot.record->index = index;
    slot.record->size = size;
    __threadfence_system();  // the fields reach the host before the flag
    *static_cast<volatile int*>(&slot.record->set) = 1;
  }
}
#endif

}  // namespace loom::cuda
