#include "tensor/backend.h"

#include <array>

#include "tensor/cpu/cpu_backend.h"

namespace loom {
namespace {

std::array<Backend*, 2>& registry() {
  static std::array<Backend*, 2> backends{&cpu::cpu_backend(), nullptr};
  return backends;
}

}  // namespace

bool is_comparison(BinaryOp op) {
  switch (op) {
    case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt:
    case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge:
      return true;
    default:
      return false;
  }
}

int64_t window_output_size(int64_t input, int kernel, int stride, int pad, int dilation) {
  // The span the window's first position can move over; negative when the
  // (padded) input is smaller than the window (C++ division would round that up to 0).
  const int64_t span = input + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

namespace {

bool one_float32(const Tensor& t) { return t.defined() && t.dtype() == kFloat32 && t.numel() == 1; }

}  // namespace

void check_update_scale_arguments(const Tensor& scale, const Tensor& good_steps, const Tensor& found_inf) {
  LOOM_CHECK(one_float32(scale) && one_float32(good_steps) && one_float32(found_inf),
             "update_grad_scale: scale, good_steps and found_inf must be one float32 element each");
  LOOM_CHECK(good_steps.device() == scale.device() && found_inf.device() == scale.device(),
             "update_grad_scale: scale is on ", scale.device(), ", good_steps on ", good_steps.device(),
             " and found_inf on ", found_inf.device());
}

void check_unscale_arguments(const TensorList& grads, const Tensor& found_inf, const Tensor& device_scale) {
  LOOM_CHECK(one_float32(found_inf) && found_inf.is_contiguous(),
             "unscale_and_check_finite: found_inf must be one float32 element");
  LOOM_CHECK(!device_scale.defined() || (one_float32(device_scale) && device_scale.device() == found_inf.device()),
             "unscale_and_check_finite: the device scale must be one float32 element on found_inf's device");
  for (size_t t = 0; t < grads.size(); ++t) {
    const Tensor& g = grads[t];
    LOOM_CHECK(g.defined(), "unscale_and_check_finite: gradient ", t, " is undefined");
    LOOM_CHECK(is_floating(g.dtype()), "unscale_and_check_finite: gradient ", t, " is ", g.dtype(),
               "; expected a floating-point tensor");
    LOOM_CHECK(g.is_contiguous(), "unscale_and_check_finite: gradient ", t, " is not contiguous");
    LOOM_CHECK(g.device() == found_inf.device(), "unscale_and_check_finite: gradient ", t, " is on ", g.device(),
               " but found_inf on ", found_inf.device());
  }
}

namespace {

// A matrix as a batch of one, for matmul: unsqueeze(0)'s view, without autograd.
Tensor batch_of_one(const Tensor& m) {
  return as_strided(m, {1, m.size(0), m.size(1)}, {m.size(0) * m.stride(0), m.stride(0), m.stride(1)},
                    m.storage_offset());
}

// The default prepared product: matmul, as a batch of one, at every run.
class MatmulEachRun : public Backend::PreparedProduct {
 public:
  MatmulEachRun(Backend& backend, const Tensor& b) : backend_(backend), b_(b) {}
  void run(const Tensor& a, const Tensor& out) const override {
    check_prepared_product_run(a, b_, out);
    backend_.matmul(batch_of_one(a), batch_of_one(b_), Tensor(), batch_of_one(out));
  }

 private:
  Backend& backend_;
  Tensor b_;
};

}  // namespace

void check_prepared_product_run(const Tensor& a, const Tensor& b, const Tensor& out) {
  LOOM_CHECK(a.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) && out.size(0) == a.size(0) &&
                 out.size(1) == b.size(1),
             "PreparedProduct::run: expected a (M, ", b.size(0), ") and out (M, ", b.size(1), ") for a ",
             b.shape(), " right operand, got ", a.shape(), " and ", out.shape());
  LOOM_CHECK(a.dtype() == b.dtype() && out.dtype() == b.dtype(), "PreparedProduct::run: a is ", a.dtype(),
             " and out ", out.dtype(), "; the right operand is ", b.dtype());
  LOOM_CHECK(a.device() == b.device() && out.device() == b.device(), "PreparedProduct::run: a is on ", a.device(),
             " and out on ", out.device(), "; the right operand is on ", b.device());
  LOOM_CHECK(out.is_contiguous(), "PreparedProduct::run: out must be contiguous");
}

std::unique_ptr<Backend::PreparedProduct> Backend::prepare_product(const Tensor& b) {
  LOOM_CHECK(b.defined() && b.dim() == 2, "prepare_product: the right operand must be a matrix, got ",
             b.defined() ? b.shape() : Shape{});
  return std::make_unique<MatmulEachRun>(*this, b);
}

std::shared_ptr<Backend::QueueObject> Backend::capture_graph(int, const std::function<void()>&) {
  LOOM_FAIL("DeviceGraph: graphs need a CUDA device; the CPU runs each op when it is called, so there is no "
            "launch to save");
}

void Backend::replay_graph(QueueObject&) { LOOM_FAIL("DeviceGraph: this device has no graphs to replay"); }

void Backend::unary_with_derivative(UnaryOp, const Tensor& x, const Tensor&, const Tensor&) {
  LOOM_FAIL("unary_with_derivative: no such kernel for ", x.dtype(), " on ", x.device(),
            " (has_unary_with_derivative says which there are)");
}

void register_backend(DeviceType type, Backend* backend) {
  registry()[static_cast<int>(type)] = backend;
}

bool has_backend(DeviceType type) { return registry()[static_cast<int>(type)] != nullptr; }

Backend& backend_for(DeviceType type) {
  Backend* backend = registry()[static_cast<int>(type)];
  LOOM_CHECK(backend != nullptr,
             "this loom was built without the CUDA backend: rebuild on a machine with the "
             "CUDA toolkit (and without --//:cuda=false) to use cuda tensors");
  return *backend;
}

void copy_data(const Tensor& src, const Tensor& dst) {
  LOOM_INTERNAL_ASSERT(src.shape() == dst.shape(), "copy_data: ", src.shape(), " vs ", dst.shape());
  if (src.numel() == 0) return;
  backend_for(src.device().is_cuda() ? src.device() : dst.device()).copy(src, dst);
}

void synchronize(Device device) { backend_for(device).synchronize(device.index()); }

bool cuda_available() { return cuda_device_count() > 0; }

int cuda_device_count() {
  return has_backend(DeviceType::CUDA) ? backend_for(DeviceType::CUDA).device_count() : 0;
}

Allocator& allocator_for(Device device) { return backend_for(device).allocator(device.index()); }
MemoryStats memory_stats(Device device) { return allocator_for(device).stats(); }
void reset_peak_memory_stats(Device device) { allocator_for(device).reset_peak(); }
void empty_cache(Device device) { allocator_for(device).empty_cache(); }

std::ostream& operator<<(std::ostream& out, const MemoryStats& s) {
  return out << "allocated=" << s.allocated_bytes << " reserved=" << s.reserved_bytes
             << " peak=" << s.peak_allocated_bytes << " system_allocs=" << s.system_allocations
             << " system_frees=" << s.system_frees;
}

}  // namespace loom
