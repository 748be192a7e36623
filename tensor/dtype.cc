#include "tensor/dtype.h"

namespace loom {

size_t element_size(DType dtype) {
  switch (dtype) {
    case kBool: return 1;
    case kUInt8: return 1;
    case kInt64: return 8;
    case kFloat32: return 4;
    case kFloat64: return 8;
  }
  LOOM_FAIL("element_size: unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case kBool: return "bool";
    case kUInt8: return "uint8";
    case kInt64: return "int64";
    case kFloat32: return "float32";
    case kFloat64: return "float64";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

DType promote_types(DType a, DType b) {
  // The enum is declared in promotion order.
  return static_cast<uint8_t>(a) >= static_cast<uint8_t>(b) ? a : b;
}

}  // namespace loom
