// Tensor: a cheap, reference-counted handle to an n-dimensional array.
//
// A tensor is a view (shape, strides, offset, dtype) of a Storage on a device.
// Copying a Tensor copies the handle, not the data; views (reshape, transpose,
// narrow, expand, ...) share storage. A tensor may require gradients: ops on it
// are then recorded on the calling thread's autograd tape, and backward()
// fills .grad() of the leaves.
//
//   Tensor w = randn({3, 4}, {.requires_grad = true});
//   Tensor x = ones({2, 3});
//   Tensor loss = x.matmul(w).relu().sum();
//   loss.backward();
//   std::cout << w.grad();   // tensor([...], shape=[3, 4], dtype=float32, device=cpu)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace loom {

namespace autograd {
class Node;
}

struct TensorImpl;
class Tensor;

struct TensorOptions {
  DType dtype = kFloat32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

using GradHook = std::function<void(const Tensor& param)>;

class Tensor {
 public:
  Tensor() = default;  // undefined: holds no data
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata (tensor.cc) ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  int64_t size(int64_t dim) const;
  const Strides& strides() const;
  int64_t stride(int64_t dim) const;
  int dim() const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  int64_t storage_offset() const;
  bool is_contiguous() const;
  size_t element_size() const { return loom::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }  // of the elements in view
  TensorOptions options() const { return {dtype(), device(), false}; }
  const std::shared_ptr<Storage>& storage() const;
  // True when both handles refer to the same tensor (not just equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  TensorImpl* impl() const { return impl_.get(); }
  // How many handles share this tensor (PyTorch's use_count).
  long use_count() const { return impl_.use_count(); }

  // ---- data access (tensor.cc); CPU only, no conversion ----
  void* raw_data() const;  // address of element 0
  template <typename T> T* data_ptr() const;
  // The single value of a one-element tensor (copied from the GPU if needed).
  template <typename T> T item() const;
  double item() const;
  template <typename T> std::vector<T> to_vector() const;  // any device, any layout

  // ---- autograd (tensor.cc) ----
  bool requires_grad() const;
  // Makes a leaf require (or stop requiring) gradients; returns *this.
  Tensor& requires_grad_(bool requires = true);
  // The accumulated gradient of a leaf (undefined until backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t output_nr() const;
  // A handle to the same data that requires no gradient and has no history.
  Tensor detach() const;
  // Replaces this leaf's data (storage, layout, dtype and so device) with
  // other's, keeping its identity, requires_grad and hooks: every handle to
  // it sees the change (PyTorch's `param.data = other`). Module::to uses it.
  void set_data(const Tensor& other) const;
  // Calls hook(*this) each time backward has finished accumulating into this
  // leaf's .grad() (PyTorch's register_post_accumulate_grad_hook). DDP uses it
  // to start reducing gradients while backward goes on.
  void register_post_accumulate_grad_hook(GradHook hook) const;
  // Backpropagates from this tensor. A non-scalar tensor needs `gradient`.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  uint32_t version() const;

  // ---- conversion and copies (ops/copy.cc) ----
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor clone() const;
  Tensor contiguous() const;

  // ---- views (ops/views.cc): share storage with *this ----
  Tensor view(const std::vector<int64_t>& shape) const;     // needs compatible strides
  Tensor reshape(const std::vector<int64_t>& shape) const;  // copies only if it must
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor expand(const std::vector<int64_t>& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- math (ops/*.cc), the same as the free functions of the same name ----
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor square() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor pow(double exponent) const;
  Tensor clamp(double min, double max) const;
  Tensor matmul(const Tensor& other) const;
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor max(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor min() const;
  Tensor min(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims, int64_t correction = 1, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;

  // ---- in-place (ops/inplace.cc): bump the version; not recorded by autograd.
  // const, as in PyTorch: the handle stays the same, the data changes. ----
  const Tensor& zero_() const;
  const Tensor& fill_(double value) const;
  const Tensor& copy_(const Tensor& src) const;  // broadcasts src; converts dtype and device
  const Tensor& add_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& add_(double value) const;
  const Tensor& sub_(const Tensor& other, double alpha = 1.0) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(double value) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(double value) const;
  const Tensor& addcmul_(const Tensor& a, const Tensor& b, double value = 1.0) const;  // += value*a*b
  const Tensor& addcdiv_(const Tensor& a, const Tensor& b, double value = 1.0) const;  // += value*a/b
  const Tensor& lerp_(const Tensor& end, double weight) const;                         // += w*(end-self)
  const Tensor& clamp_(double min, double max) const;
  const Tensor& sqrt_() const;
  const Tensor& masked_fill_(const Tensor& mask, double value) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

using TensorList = std::vector<Tensor>;

// What autograd keeps per tensor; created on first use.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                                     // leaves
  std::shared_ptr<autograd::Node> grad_fn;         // non-leaves: the op that made it
  uint32_t output_nr = 0;                          // which output of grad_fn
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: their AccumulateGrad
  std::vector<GradHook> post_accumulate_grad_hooks;
  std::mutex mutex;  // guards grad and grad_accumulator across threads
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& autograd_meta();  // creates it on first use
};

// A tensor over `storage` with the given layout; no checks, no autograd.
Tensor make_tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                   int64_t offset, DType dtype);
// A view sharing `base`'s storage with a new layout; no autograd.
Tensor as_strided(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset);

std::ostream& operator<<(std::ostream& out, const Tensor& tensor);  // print.cc

}  // namespace loom
