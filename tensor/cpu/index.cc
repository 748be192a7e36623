// CPU indexing kernels: index_select / index_add (embedding lookup and its
// gradient) and gather / scatter_add. Every index is checked before anything
// is written, so a bad index leaves the output untouched.
#include <cstring>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/parallel.h"

namespace loom::cpu {
namespace {

void check_indices(const char* op, const Tensor& index, int dim, int64_t size) {
  const int64_t* idx = index.data_ptr<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i)
    LOOM_CHECK(idx[i] >= 0 && idx[i] < size, op, ": index ", idx[i],
               " is out of range for dimension ", dim, " of size ", size);
}

// (outer, size, inner) of a contiguous tensor around `dim`.
void split_around(const Tensor& t, int dim, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int d = 0; d < dim; ++d) outer *= t.size(d);
  for (int d = dim + 1; d < t.dim(); ++d) inner *= t.size(d);
}

// Offset in `t` of the element at position `linear` of `shape`, with the
// coordinate along `dim` replaced by `dim_index`.
int64_t offset_with(const Tensor& t, const Shape& shape, int64_t linear, int dim, int64_t dim_index) {
  int64_t offset = 0;
  for (int d = shape.size() - 1; d >= 0; --d) {
    int64_t i = linear % shape[d];
    linear /= shape[d];
    offset += (d == dim ? dim_index : i) * t.stride(d);
  }
  return offset;
}

}  // namespace

void CpuBackend::index_select(const Tensor& a, int dim, const Tensor& index, const Tensor& out) {
  if (run_in_float32({a, out}, {1}, [&](const TensorList& t) { index_select(t[0], dim, index, t[1]); })) return;
  check_indices("index_select", index, dim, a.size(dim));
  int64_t outer, inner;
  split_around(a, dim, outer, inner);
  const int64_t src_size = a.size(dim), count = index.numel();
  const size_t row_bytes = inner * a.element_size();
  const char* src = static_cast<const char*>(a.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const int64_t* idx = index.data_ptr<int64_t>();
  parallel_for(outer * count, items_per_grain(inner),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   int64_t o = r / count, i = r % count;
                   std::memcpy(dst + r * row_bytes, src + (o * src_size + idx[i]) * row_bytes, row_bytes);
                 }
               });
}

void CpuBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  if (run_in_float32({out, src}, {0}, [&](const TensorList& t) { index_add(t[0], dim, index, t[1]); })) return;
  check_indices("index_add", index, dim, out.size(dim));
  int64_t outer, inner;
  split_around(out, dim, outer, inner);
  const int64_t out_size = out.size(dim), count = index.numel();
  const int64_t* idx = index.data_ptr<int64_t>();
  dispatch_numeric(out.dtype(), "index_add", [&](auto tag) {
    using T = decltype(tag);
    T* o_data = out.data_ptr<T>();
    const T* s_data = src.data_ptr<T>();
    // Threads split the columns, so repeated indices never race.
    parallel_for(inner, 1024, [&](int64_t c0, int64_t c1) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < count; ++i) {
          T* dst = o_data + (o * out_size + idx[i]) * inner;
          const T* s = s_data + (o * count + i) * inner;
          for (int64_t c = c0; c < c1; ++c) dst[c] += s[c];
        }
    });
  });
}

void CpuBackend::gather(const Tensor& a, int dim, const Tensor& index, const Tensor& out) {
  if (run_in_float32({a, out}, {1}, [&](const TensorList& t) { gather(t[0], dim, index, t[1]); })) return;
  check_indices("gather", index, dim, a.size(dim));
  const int64_t* idx = index.data_ptr<int64_t>();
  const Shape& shape = index.shape();
  dispatch_all(a.dtype(), "gather", [&](auto tag) {
    using T = decltype(tag);
    const T* src = a.data_ptr<T>();
    T* dst = out.data_ptr<T>();
    parallel_for(index.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) dst[p] = src[offset_with(a, shape, p, dim, idx[p])];
    });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  if (run_in_float32({out, src}, {0}, [&](const TensorList& t) { scatter_add(t[0], dim, index, t[1]); })) return;
  check_indices("scatter_add", index, dim, out.size(dim));
  const int64_t* idx = index.data_ptr<int64_t>();
  const Shape& shape = index.shape();
  dispatch_numeric(out.dtype(), "scatter_add", [&](auto tag) {
    using T = decltype(tag);
    T* dst = out.data_ptr<T>();
    const T* s = src.data_ptr<T>();
    // Serial: two positions may add into the same element.
    for (int64_t p = 0; p < index.numel(); ++p) dst[offset_with(out, shape, p, dim, idx[p])] += s[p];
  });
}

}  // namespace loom::cpu
