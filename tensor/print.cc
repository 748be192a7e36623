// Printing a tensor the way PyTorch does: values (summarised when large), then
// shape, dtype, device and whether it requires grad.
#include <cmath>
#include <iomanip>
#include <sstream>

#include "tensor/tensor.h"

namespace loom {
namespace {

constexpr int64_t kSummarizeAbove = 1000;  // elements; PyTorch's threshold
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false, scientific = false, boolean = false;
  int width = 1;

  std::string format(double v) const {
    std::ostringstream out;
    if (boolean) {
      out << (v != 0 ? "True" : "False");
    } else if (!floating) {
      out << static_cast<int64_t>(v);
    } else if (std::isnan(v) || std::isinf(v)) {
      out << (std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
    } else if (scientific) {
      out << std::scientific << std::setprecision(4) << v;
    } else {
      out << std::fixed << std::setprecision(4) << v;
    }
    return out.str();
  }
};

void print_dims(std::ostream& out, const std::vector<double>& values, const Shape& shape,
                const Strides& strides, int dim, int64_t offset, const Formatter& f, bool summarize,
                int indent) {
  if (shape.size() == 0) {
    out << f.format(values[offset]);
    return;
  }
  out << '[';
  const int64_t n = shape[dim];
  const bool last = dim == shape.size() - 1;
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      out << (last ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    if (last) {
      std::string s = f.format(values[offset + i * strides[dim]]);
      out << std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') << s;
    } else {
      print_dims(out, values, shape, strides, dim + 1, offset + i * strides[dim], f, summarize,
                 indent + 1);
    }
    if (i + 1 < n) {
      out << ',';
      out << (last ? " " : std::string(shape.size() - dim - 1, '\n') + std::string(indent + 1, ' '));
    }
  }
  out << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& t) {
  if (!t.defined()) return out << "tensor(undefined)";
  std::vector<double> values = t.to_vector<double>();
  Formatter f;
  f.boolean = t.dtype() == kBool;
  f.floating = is_floating(t.dtype());
  double max_abs = 0, min_abs = INFINITY;
  for (double v : values)
    if (std::isfinite(v) && v != 0) {
      max_abs = std::max(max_abs, std::abs(v));
      min_abs = std::min(min_abs, std::abs(v));
    }
  f.scientific = f.floating && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY));
  for (double v : values) f.width = std::max<int>(f.width, f.format(v).size());

  const std::string prefix = "tensor(";
  print_dims(out << prefix, values, t.shape(), contiguous_strides(t.shape()), 0, 0, f,
             t.numel() > kSummarizeAbove, prefix.size());
  out << ", shape=" << t.shape() << ", dtype=" << t.dtype() << ", device=" << t.device();
  if (t.requires_grad()) out << ", requires_grad=true";
  return out << ')';
}

}  // namespace loom
