// The core of Tensor: metadata, data access and autograd bookkeeping. The math
// methods are defined with their ops in tensor/ops/.
#include "tensor/tensor.h"

#include "tensor/backend.h"
#include "tensor/creation.h"

namespace loom {

AutogradMeta& TensorImpl::autograd_meta() {
  if (!autograd) autograd = std::make_unique<AutogradMeta>();
  return *autograd;
}

namespace {

TensorImpl& checked(const std::shared_ptr<TensorImpl>& impl, const char* what) {
  LOOM_CHECK(impl != nullptr, what, ": the tensor is undefined (default-constructed)");
  return *impl;
}

}  // namespace

const Shape& Tensor::shape() const { return checked(impl_, "shape").shape; }
const Strides& Tensor::strides() const { return checked(impl_, "strides").strides; }
int Tensor::dim() const { return checked(impl_, "dim").shape.size(); }
int64_t Tensor::numel() const { return loom::numel(checked(impl_, "numel").shape); }
DType Tensor::dtype() const { return checked(impl_, "dtype").dtype; }
Device Tensor::device() const { return checked(impl_, "device").storage->device(); }
int64_t Tensor::storage_offset() const { return checked(impl_, "storage_offset").offset; }
const std::shared_ptr<Storage>& Tensor::storage() const { return checked(impl_, "storage").storage; }
bool Tensor::is_contiguous() const { return loom::is_contiguous(shape(), strides()); }
uint32_t Tensor::version() const { return storage()->version(); }

int64_t Tensor::size(int64_t dim) const { return shape()[wrap_dim(dim, this->dim(), "size")]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[wrap_dim(dim, this->dim(), "stride")]; }

void* Tensor::raw_data() const {
  const TensorImpl& impl = checked(impl_, "raw_data");
  LOOM_CHECK(!impl.storage->released(), "a tensor ", impl.shape,
             " whose memory is released (FSDP frees a unit's parameters outside its forward and backward; "
             "read them through FullyShardedDataParallel::full_state_dict())");
  return static_cast<char*>(impl.storage->data()) + impl.offset * loom::element_size(impl.dtype);
}

template <typename T>
T* Tensor::data_ptr() const {
  LOOM_CHECK(dtype() == dtype_of<T>(), "data_ptr: the tensor is ", dtype(), ", not ",
             dtype_of<T>());
  return static_cast<T*>(raw_data());
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = empty(shape(), {.dtype = dtype_of<T>()});
  copy_data(*this, host);
  const T* data = host.data_ptr<T>();
  return std::vector<T>(data, data + host.numel());
}

template <typename T>
T Tensor::item() const {
  LOOM_CHECK(numel() == 1, "item: the tensor has ", numel(), " elements (shape ", shape(),
             "), expected exactly one");
  return to_vector<T>()[0];
}

double Tensor::item() const { return item<double>(); }

#define LOOM_INSTANTIATE(T)                              \
  template T* Tensor::data_ptr<T>() const;               \
  template T Tensor::item<T>() const;                    \
  template std::vector<T> Tensor::to_vector<T>() const;
LOOM_INSTANTIATE(bool)
LOOM_INSTANTIATE(uint8_t)
LOOM_INSTANTIATE(int64_t)
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(double)
#undef LOOM_INSTANTIATE

// ---- autograd bookkeeping ----

bool Tensor::requires_grad() const {
  const TensorImpl& impl = checked(impl_, "requires_grad");
  return impl.autograd && impl.autograd->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires) {
  LOOM_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad (this one "
             "was made by an op; use detach() to get a leaf)");
  LOOM_CHECK(!requires || is_floating(dtype()),
             "requires_grad_: only floating-point tensors can require gradients, got ", dtype());
  impl_->autograd_meta().requires_grad = requires;
  return *this;
}

Tensor Tensor::grad() const {
  TensorImpl& impl = checked(impl_, "grad");
  if (!impl.autograd) return Tensor();
  std::lock_guard<std::mutex> lock(impl.autograd->mutex);
  return impl.autograd->grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  TensorImpl& impl = checked(impl_, "set_grad");
  if (grad.defined())
    LOOM_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
               "set_grad: gradient ", grad.shape(), " ", grad.dtype(), " on ", grad.device(),
               " does not match the tensor ", shape(), " ", dtype(), " on ", device());
  AutogradMeta& meta = impl.autograd_meta();
  std::lock_guard<std::mutex> lock(meta.mutex);
  meta.grad = grad;
}

bool Tensor::is_leaf() const {
  const TensorImpl& impl = checked(impl_, "is_leaf");
  return !impl.autograd || !impl.autograd->grad_fn;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  const TensorImpl& impl = checked(impl_, "grad_fn");
  return impl.autograd ? impl.autograd->grad_fn : none;
}

uint32_t Tensor::output_nr() const {
  const TensorImpl& impl = checked(impl_, "output_nr");
  return impl.autograd ? impl.autograd->output_nr : 0;
}

Tensor Tensor::detach() const {
  const TensorImpl& impl = checked(impl_, "detach");
  return make_tensor(impl.storage, impl.shape, impl.strides, impl.offset, impl.dtype);
}

void Tensor::set_data(const Tensor& other) const {
  TensorImpl& impl = checked(impl_, "set_data");
  LOOM_CHECK(other.defined(), "set_data: the new data is undefined");
  LOOM_CHECK(is_leaf(), "set_data: only leaf tensors can have their data replaced");
  LOOM_CHECK(!requires_grad() || is_floating(other.dtype()), "set_data: a tensor that requires grad needs "
             "floating-point data, got ", other.dtype());
  const TensorImpl& src = *other.impl();
  impl.storage = src.storage;
  impl.shape = src.shape;
  impl.strides = src.strides;
  impl.offset = src.offset;
  impl.dtype = src.dtype;
}

void Tensor::register_post_accumulate_grad_hook(GradHook hook) const {
  LOOM_CHECK(is_leaf() && requires_grad(), "register_post_accumulate_grad_hook: only leaf "
             "tensors that require grad accumulate gradients");
  AutogradMeta& meta = impl_->autograd_meta();
  std::lock_guard<std::mutex> lock(meta.mutex);
  meta.post_accumulate_grad_hooks.push_back(std::move(hook));
}

Tensor make_tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
                   int64_t offset, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor as_strided(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset) {
  return make_tensor(base.storage(), shape, strides, offset, base.dtype());
}

}  // namespace loom
