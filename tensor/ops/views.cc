// Views: new shapes and strides over the same storage, no data copied. Each
// records a backward that maps the gradient back to the input's layout.
#include <algorithm>
#include <optional>

#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

// Strides that let `new_shape` view memory laid out as (shape, strides), or
// nothing when the dims it merges are not contiguous with each other.
// Dims are matched in chunks whose elements are evenly spaced in memory.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& new_shape) {
  if (numel(shape) == 0 || shape.size() == 0) return contiguous_strides(new_shape);
  Strides out = Dims::filled(new_shape.size(), 1);
  int view_d = new_shape.size() - 1;
  int64_t chunk_stride = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    const bool chunk_ends = d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = strides[d - 1];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Records `view` as a view of x whose gradient is backward(dy).
Tensor recorded_view(const char* name, const Tensor& x, Tensor view,
                     std::function<Tensor(const Tensor&)> backward) {
  if (autograd::needs_grad(x))
    autograd::record(name, {x}, view, [backward](const TensorList& g) { return TensorList{backward(g[0])}; });
  return view;
}

// The gradient of a view that picks part of x: zeros, with dy written into
// the same part (picked by `part`, applied to the zero tensor).
std::function<Tensor(const Tensor&)> scatter_into_zeros(const Shape& shape,
                                                        std::function<Tensor(const Tensor&)> part) {
  return [shape, part](const Tensor& dy) {
    Tensor dx = zeros(shape, dy.options());
    copy_data(dy, part(dx));
    return dx;
  };
}

Tensor view_as(const Tensor& x, const Shape& shape, const char* op) {
  std::optional<Strides> strides = view_strides(x.shape(), x.strides(), shape);
  LOOM_CHECK(strides.has_value(), op, ": shape ", shape, " cannot view a tensor of shape ", x.shape(),
             " and strides ", x.strides(), " (its memory is not contiguous in the right way); use "
             "reshape(), which copies when it must");
  return recorded_view("ViewBackward", x, as_strided(x, shape, *strides, x.storage_offset()),
                       [old = x.shape().vec()](const Tensor& dy) { return dy.reshape(old); });
}

}  // namespace

Tensor Tensor::view(const std::vector<int64_t>& shape) const {
  return view_as(*this, infer_shape(shape, numel(), "view"), "view");
}

Tensor Tensor::reshape(const std::vector<int64_t>& shape_in) const {
  Shape shape = infer_shape(shape_in, numel(), "reshape");
  if (shape == this->shape()) return *this;
  if (view_strides(this->shape(), strides(), shape)) return view_as(*this, shape, "reshape");
  return view_as(contiguous(), shape, "reshape");
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int start = wrap_dim(start_dim, dim(), "flatten"), end = wrap_dim(end_dim, dim(), "flatten");
  LOOM_CHECK(start <= end, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  std::vector<int64_t> shape;
  for (int d = 0; d < start; ++d) shape.push_back(size(d));
  int64_t merged = 1;
  for (int d = start; d <= end; ++d) merged *= size(d);
  shape.push_back(merged);
  for (int d = end + 1; d < dim(); ++d) shape.push_back(size(d));
  return reshape(shape);
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  if (dim() == 0) return *this;
  const int a = wrap_dim(dim0, dim(), "transpose"), b = wrap_dim(dim1, dim(), "transpose");
  Shape shape = this->shape();
  Strides st = strides();
  std::swap(shape[a], shape[b]);
  std::swap(st[a], st[b]);
  return recorded_view("TransposeBackward", *this, as_strided(*this, shape, st, storage_offset()),
                       [a, b](const Tensor& dy) { return dy.transpose(a, b); });
}

Tensor Tensor::t() const {
  LOOM_CHECK(dim() <= 2, "t: expected a tensor of at most 2 dimensions, got shape ", shape(),
             "; use transpose(dim0, dim1)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  LOOM_CHECK(static_cast<int>(dims.size()) == dim(), "permute: got ", dims.size(),
             " dims for a tensor of ", dim(), " dimensions");
  Shape shape;
  Strides st;
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(dims[i], dim(), "permute");
    LOOM_CHECK(inverse[d] < 0, "permute: dimension ", d, " appears twice in ", Shape(dims));
    inverse[d] = static_cast<int64_t>(i);
    shape.push_back(size(d));
    st.push_back(stride(d));
  }
  return recorded_view("PermuteBackward", *this, as_strided(*this, shape, st, storage_offset()),
                       [inverse](const Tensor& dy) { return dy.permute(inverse); });
}

Tensor Tensor::slice(int64_t dim_in, int64_t start, int64_t end, int64_t step) const {
  const int d = wrap_dim(dim_in, dim(), "slice");
  LOOM_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = size(d);
  // Python slicing: negative positions count from the end; out of range clamps.
  auto clamp_pos = [n](int64_t p) { return std::clamp<int64_t>(p < 0 ? p + n : p, 0, n); };
  start = clamp_pos(start);
  end = std::max(clamp_pos(end), start);
  Shape shape = this->shape();
  Strides st = strides();
  shape[d] = (end - start + step - 1) / step;
  st[d] = stride(d) * step;
  Tensor view = as_strided(*this, shape, st, storage_offset() + start * stride(d));
  return recorded_view("SliceBackward", *this, view,
                       scatter_into_zeros(this->shape(), [d, start, end, step](const Tensor& z) {
                         NoGradGuard no_grad;
                         return z.slice(d, start, end, step);
                       }));
}

Tensor Tensor::narrow(int64_t dim_in, int64_t start, int64_t length) const {
  const int d = wrap_dim(dim_in, dim(), "narrow");
  if (start < 0) start += size(d);
  LOOM_CHECK(start >= 0 && length >= 0 && start + length <= size(d), "narrow: [", start, ", ",
             start + length, ") is out of range for dimension ", dim_in, " of size ", size(d));
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t dim_in, int64_t index) const {
  const int d = wrap_dim(dim_in, dim(), "select");
  const int64_t n = size(d);
  LOOM_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dimension ",
             dim_in, " of size ", n);
  if (index < 0) index += n;
  Shape shape = this->shape();
  Strides st = strides();
  shape.erase(d);
  st.erase(d);
  Tensor view = as_strided(*this, shape, st, storage_offset() + index * stride(d));
  return recorded_view("SelectBackward", *this, view,
                       scatter_into_zeros(this->shape(), [d, index](const Tensor& z) {
                         NoGradGuard no_grad;
                         return z.select(d, index);
                       }));
}

Tensor Tensor::expand(const std::vector<int64_t>& sizes) const {
  const int n = static_cast<int>(sizes.size()), lead = n - dim();
  LOOM_CHECK(lead >= 0, "expand: the target shape ", Shape(sizes), " has fewer dimensions than the "
             "tensor's shape ", shape());
  Shape target;
  for (int i = 0; i < n; ++i) {
    int64_t s = sizes[i];
    if (s == -1) {
      LOOM_CHECK(i >= lead, "expand: -1 is not allowed for the new leading dimension ", i);
      s = size(i - lead);
    }
    LOOM_CHECK(i < lead || size(i - lead) == s || size(i - lead) == 1, "expand: the tensor's shape ",
               shape(), " cannot be expanded to ", Shape(sizes), " (dimension ", i, ": ",
               size(i - lead), " vs ", s, ")");
    target.push_back(s);
  }
  if (target == shape()) return *this;
  return recorded_view("ExpandBackward", *this, detail::expand_raw(*this, target),
                       [shape = shape(), dtype = dtype()](const Tensor& dy) {
                         return detail::sum_to(dy, shape, dtype);
                       });
}

Tensor Tensor::expand_as(const Tensor& other) const { return expand(other.shape().vec()); }

Tensor Tensor::squeeze() const {
  std::vector<int64_t> shape;
  for (int64_t s : this->shape())
    if (s != 1) shape.push_back(s);
  return reshape(shape);
}

Tensor Tensor::squeeze(int64_t dim_in) const {
  if (dim() == 0) return *this;
  const int d = wrap_dim(dim_in, dim(), "squeeze");
  if (size(d) != 1) return *this;  // as PyTorch: squeezing a non-1 dim does nothing
  Shape shape = this->shape();
  Strides st = strides();
  shape.erase(d);
  st.erase(d);
  return recorded_view("SqueezeBackward", *this, as_strided(*this, shape, st, storage_offset()),
                       [d](const Tensor& dy) { return dy.unsqueeze(d); });
}

Tensor Tensor::unsqueeze(int64_t dim_in) const {
  const int d = wrap_dim(dim_in, dim() + 1, "unsqueeze");
  Shape shape = this->shape();
  Strides st = strides();
  int64_t stride_here = d < dim() ? stride(d) * size(d) : 1;
  shape.insert(d, 1);
  st.insert(d, stride_here);
  return recorded_view("UnsqueezeBackward", *this, as_strided(*this, shape, st, storage_offset()),
                       [d](const Tensor& dy) { return dy.squeeze(d); });
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return loom::split(*this, split_size, dim);
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return loom::chunk(*this, chunks, dim);
}

}  // namespace loom
