// CPU reductions: sum/max/min over any set of dims, argmax/argmin along one
// dim, and softmax / log-softmax (forward and backward) along one dim.
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/vector_math.h"

namespace loom::cpu {
namespace {

// Sums of float32 accumulate in float64: a reduction over a million
// elements then stays within float32 rounding of the exact sum.
template <typename T> struct Accumulator { using type = T; };
template <> struct Accumulator<float> { using type = double; };
template <> struct Accumulator<uint8_t> { using type = int64_t; };
template <> struct Accumulator<bool> { using type = int64_t; };

template <typename T>
bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
  return false;
}

// The identities of max and min: -inf and +inf where the type has them (so
// that the max of an all -inf slice is -inf), else the extreme values.
template <typename T> T max_identity() {
  if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::lowest();
}
template <typename T> T min_identity() {
  if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
  return std::numeric_limits<T>::max();
}

// max/min that propagate NaN, as PyTorch's do.
template <typename T> T nan_max(T a, T b) { return (is_nan(a) || a >= b) ? a : b; }
template <typename T> T nan_min(T a, T b) { return (is_nan(a) || a <= b) ? a : b; }

// The split of a's dims into kept (also in out) and reduced ones.
struct ReductionPlan {
  Shape kept_shape;        // sizes of kept dims
  Strides kept_a_strides;  // their strides in a and out
  Strides kept_out_strides;
  Shape reduced_shape;     // sizes of reduced dims, innermost last
  Strides reduced_strides;
};

ReductionPlan plan_reduction(const Tensor& a, const Tensor& out) {
  ReductionPlan plan;
  for (int d = 0; d < a.dim(); ++d) {
    if (a.size(d) == 1) continue;
    if (out.size(d) == 1) {
      plan.reduced_shape.push_back(a.size(d));
      plan.reduced_strides.push_back(a.stride(d));
    } else {
      plan.kept_shape.push_back(a.size(d));
      plan.kept_a_strides.push_back(a.stride(d));
      plan.kept_out_strides.push_back(out.stride(d));
    }
  }
  return plan;
}

// Reduces the block of `a` at `base` over the plan's reduced dims.
template <typename T, typename Acc, typename Combine, typename RowReduce>
Acc reduce_block(const T* base, const ReductionPlan& plan, Acc init, Combine combine,
                 RowReduce row_reduce) {
  const Shape& shape = plan.reduced_shape;
  const int dims = shape.size();
  if (dims == 0) return combine(init, static_cast<Acc>(*base));
  if (numel(shape) == 0) return init;
  const int64_t inner = shape[dims - 1], inner_stride = plan.reduced_strides[dims - 1];
  const int64_t rows = numel(shape) / inner;
  std::array<int64_t, kMaxDims> index{};
  Acc acc = init;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;
    for (int d = 0; d < dims - 1; ++d) offset += index[d] * plan.reduced_strides[d];
    const T* row = base + offset;
    if (inner_stride == 1) {
      acc = combine(acc, row_reduce(const_array_map<T>(reinterpret_cast<const char*>(row), inner)));
    } else {
      for (int64_t j = 0; j < inner; ++j) acc = combine(acc, static_cast<Acc>(row[j * inner_stride]));
    }
    for (int d = dims - 2; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return acc;
}

template <typename T, typename Acc, typename Combine, typename RowReduce>
void reduce_kernel(const Tensor& a, const Tensor& out, Acc init, Combine combine,
                   RowReduce row_reduce) {
  ReductionPlan plan = plan_reduction(a, out);
  const T* a_data = a.data_ptr<T>();
  T* out_data = out.data_ptr<T>();
  const int64_t outputs = numel(plan.kept_shape);
  const int64_t per_output = std::max<int64_t>(numel(plan.reduced_shape), 1);
  parallel_for(outputs, items_per_grain(per_output), [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      int64_t a_offset = 0, out_offset = 0, rest = o;
      for (int d = plan.kept_shape.size() - 1; d >= 0; --d) {
        int64_t i = rest % plan.kept_shape[d];
        rest /= plan.kept_shape[d];
        a_offset += i * plan.kept_a_strides[d];
        out_offset += i * plan.kept_out_strides[d];
      }
      out_data[out_offset] =
          static_cast<T>(reduce_block<T, Acc>(a_data + a_offset, plan, init, combine, row_reduce));
    }
  });
}

// When `a` is contiguous and the sum runs over its leading dims only (the
// bias gradient of a Linear: (rows, features) -> (features)), the sizes
// (rows, columns) of `a` seen as a matrix summed over its rows; else nullopt.
std::optional<std::pair<int64_t, int64_t>> leading_dims_sum(const Tensor& a, const Tensor& out) {
  if (!a.is_contiguous() || !out.is_contiguous() || a.dim() != out.dim()) return std::nullopt;
  int split = 0;
  while (split < a.dim() && out.size(split) == 1) ++split;
  for (int d = split; d < a.dim(); ++d)
    if (out.size(d) != a.size(d)) return std::nullopt;
  int64_t rows = 1;
  for (int d = 0; d < split; ++d) rows *= a.size(d);
  return std::make_pair(rows, out.numel());
}

// Sums the rows of a (rows, columns) matrix, a row at a time, into
// accumulators for a tile of columns on the stack: walking each column down
// instead reads a cache line per element. Each column's sum runs in row order
// whatever the threads, so the result does not depend on their number.
// Threads take slices of at least kSlice columns; a slice is read in tiles of
// up to kTile columns (kTile doubles, 8 KB, stay in L1). A slice of a row as
// wide as the tile is read front to back, once: with 256-column tiles, the
// LSTM's (4096, 512) gate gradients were read as two half-row strided walks
// at a third of the memory's bandwidth (ops_bench column_sums).
template <typename T, typename Acc>
void sum_rows(const T* a, int64_t rows, int64_t columns, T* out) {
  constexpr int64_t kSlice = 256, kTile = 1024;
  parallel_for(columns, std::max<int64_t>(kSlice, items_per_grain(rows)),
               [&](int64_t begin, int64_t end) {
                 Acc acc[kTile];
                 for (int64_t first = begin; first < end; first += kTile) {
                   const int64_t width = std::min(kTile, end - first);
                   std::fill(acc, acc + width, Acc(0));
                   for (int64_t r = 0; r < rows; ++r) {
                     const T* row = a + r * columns + first;
#pragma omp simd
                     for (int64_t j = 0; j < width; ++j) acc[j] += static_cast<Acc>(row[j]);
                   }
                   for (int64_t j = 0; j < width; ++j) out[first + j] = static_cast<T>(acc[j]);
                 }
               });
}

// Views a contiguous tensor as (outer, size of dim, inner).
struct RowLayout {
  int64_t outer = 1, size = 1, inner = 1;
};

RowLayout row_layout(const Tensor& t, int dim) {
  RowLayout l;
  for (int d = 0; d < dim; ++d) l.outer *= t.size(d);
  l.size = t.size(dim);
  for (int d = dim + 1; d < t.dim(); ++d) l.inner *= t.size(d);
  return l;
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& a, const Tensor& out) {
  if (run_in_float32({a, out}, {1}, [&](const TensorList& t) { reduce(op, t[0], t[1]); })) return;
  dispatch_numeric(a.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    using Acc = typename Accumulator<T>::type;
    switch (op) {
      case ReduceOp::Sum:
        if (const auto matrix = leading_dims_sum(a, out); matrix && matrix->first > 1)
          return sum_rows<T, Acc>(a.data_ptr<T>(), matrix->first, matrix->second, out.data_ptr<T>());
        return reduce_kernel<T, Acc>(
            a, out, Acc(0), [](Acc x, Acc y) { return x + y; },
            [](const auto& row) { return fixed_order_sum(row.template cast<Acc>()); });
      case ReduceOp::Max:
        return reduce_kernel<T, T>(
            a, out, max_identity<T>(), [](T x, T y) { return nan_max(x, y); },
            [](const auto& row) { return row.template maxCoeff<Eigen::PropagateNaN>(); });
      case ReduceOp::Min:
        return reduce_kernel<T, T>(
            a, out, min_identity<T>(), [](T x, T y) { return nan_min(x, y); },
            [](const auto& row) { return row.template minCoeff<Eigen::PropagateNaN>(); });
    }
  });
}

void CpuBackend::arg_reduce(ArgReduceOp op, const Tensor& a, int dim, const Tensor& out) {
  if (run_in_float32({a}, {}, [&](const TensorList& t) { arg_reduce(op, t[0], dim, out); })) return;
  dispatch_numeric(a.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    const bool want_max = op == ArgReduceOp::ArgMax;
    const T* a_data = a.data_ptr<T>();
    int64_t* out_data = out.data_ptr<int64_t>();
    const Shape& shape = out.shape();
    const int64_t size = a.size(dim), stride = a.stride(dim);
    parallel_for(out.numel(), items_per_grain(size),
                 [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        int64_t a_offset = 0, out_offset = 0, rest = o;
        for (int d = shape.size() - 1; d >= 0; --d) {
          int64_t i = rest % shape[d];
          rest /= shape[d];
          a_offset += i * a.stride(d);
          out_offset += i * out.stride(d);
        }
        const T* p = a_data + a_offset;
        int64_t best = 0;
        for (int64_t j = 1; j < size && !is_nan(p[best * stride]); ++j) {
          T x = p[j * stride], b = p[best * stride];
          if (is_nan(x) || (want_max ? x > b : x < b)) best = j;
        }
        out_data[out_offset] = best;
      }
    });
  });
}

namespace {

// Rows of a causal softmax (SoftmaxParams) are contiguous: row r is query
// r % T, which sees the first r % T + 1 elements; the rest output 0.
void check_causal_layout(const Tensor& t, int dim, const SoftmaxParams& p) {
  LOOM_INTERNAL_ASSERT(!p.causal || (!p.log && t.dim() >= 2 && dim == t.dim() - 1 && t.size(-1) == t.size(-2)),
                       "causal softmax needs the last dim of a (..., T, T) tensor, got dim ", dim, " of ", t.shape());
}

}  // namespace

void CpuBackend::softmax(const Tensor& a, int dim, const SoftmaxParams& p, const Tensor& out) {
  if (run_in_float32({a, out}, {1}, [&](const TensorList& t) { softmax(t[0], dim, p, t[1]); })) return;
  check_causal_layout(a, dim, p);
  const bool log = p.log;
  dispatch_floating(a.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(p.scale);  // > 0: max(scale x) = scale max(x), exactly
    RowLayout l = row_layout(a, dim);
    const T* x = a.data_ptr<T>();
    T* y = out.data_ptr<T>();
    parallel_for(l.outer * l.inner, items_per_grain(l.size), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r / l.inner, i = r % l.inner, base = o * l.size * l.inner + i;
        if (l.inner == 1) {  // a contiguous row: vectorised
          const int64_t seen = p.causal ? r % l.size + 1 : l.size;
          auto in = ConstArrayMap<T>(x + base, seen);
          auto res = ArrayMap<T>(y + base, seen);
          T max = in.maxCoeff() * scale;
          res = in * scale;
          exp_shifted(res.data(), seen, max);  // every element in exp8's vector lanes
          T sum = fixed_order_sum(res);
          if (log)
            res = in * scale - (max + std::log(sum));
          else
            res /= sum;
          ArrayMap<T>(y + base + seen, l.size - seen).setZero();
          continue;
        }
        T max = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < l.size; ++j) max = std::max(max, x[base + j * l.inner] * scale);
        T sum = 0;
        for (int64_t j = 0; j < l.size; ++j) sum += std::exp(x[base + j * l.inner] * scale - max);
        for (int64_t j = 0; j < l.size; ++j) {
          T v = x[base + j * l.inner] * scale - max;
          y[base + j * l.inner] = log ? v - std::log(sum) : std::exp(v) / sum;
        }
      }
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& y_t, const Tensor& dy_t, int dim, const SoftmaxParams& p,
                                  const Tensor& dx_t) {
  if (run_in_float32({y_t, dy_t, dx_t}, {2}, [&](const TensorList& t) { softmax_backward(t[0], t[1], dim, p, t[2]); }))
    return;
  check_causal_layout(y_t, dim, p);
  // softmax:     dx = scale y (dy - sum(dy y))
  // log_softmax: dx = scale (dy - exp(y) sum(dy))
  // Causal rows: y is 0 past the query's position, and so is dx.
  const bool log = p.log;
  dispatch_floating(y_t.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T scale = T(p.scale);
    RowLayout l = row_layout(y_t, dim);
    const T* y = y_t.data_ptr<T>();
    const T* dy = dy_t.data_ptr<T>();
    T* dx = dx_t.data_ptr<T>();
    parallel_for(l.outer * l.inner, items_per_grain(l.size), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t o = r / l.inner, i = r % l.inner, base = o * l.size * l.inner + i;
        if (l.inner == 1) {  // a contiguous row: vectorised (a loss's rows of logits)
          const int64_t seen = p.causal ? r % l.size + 1 : l.size;
          const ConstArrayMap<T> y_row(y + base, seen), dy_row(dy + base, seen);
          ArrayMap<T> dx_row(dx + base, seen);
          if (log) {  // exp(y) into dx first: every element by exp_shifted's vector lanes
            const T dot = fixed_order_sum(dy_row);
            dx_row = y_row;
            exp_shifted(dx_row.data(), seen, T(0));
            dx_row = scale * (dy_row - dx_row * dot);
          } else {
            const T dot = fixed_order_sum(dy_row * y_row);
            dx_row = scale * y_row * (dy_row - dot);
          }
          ArrayMap<T>(dx + base + seen, l.size - seen).setZero();
          continue;
        }
        T dot = 0;  // a strided row (never causal: check_causal_layout)
        for (int64_t j = 0; j < l.size; ++j) {
          int64_t k = base + j * l.inner;
          dot += log ? dy[k] : dy[k] * y[k];
        }
        for (int64_t j = 0; j < l.size; ++j) {
          int64_t k = base + j * l.inner;
          dx[k] = scale * (log ? dy[k] - std::exp(y[k]) * dot : y[k] * (dy[k] - dot));
        }
      }
    });
  });
}

}  // namespace loom::cpu
