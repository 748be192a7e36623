#include "tensor/dtype.h"

namespace loom {

size_t element_size(DType dtype) {
  switch (dtype) {
    case kBool: return 1;
    case kUInt8: return 1;
    case kInt64: return 8;
    case kFloat32: return 4;
    case kFloat64: return 8;
    case kBFloat16: return 2;
    case kFloat16: return 2;
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
    case kBFloat16: return "bfloat16";
    case kFloat16: return "float16";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& out, DType dtype) { return out << dtype_name(dtype); }

namespace {

int promotion_rank(DType dtype) {
  switch (dtype) {
    case kBool: return 0;
    case kUInt8: return 1;
    case kInt64: return 2;
    case kBFloat16: return 3;
    case kFloat16: return 3;
    case kFloat32: return 4;
    case kFloat64: return 5;
  }
  LOOM_FAIL("promote_types: unknown dtype ", static_cast<int>(dtype));
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const int ra = promotion_rank(a), rb = promotion_rank(b);
  if (ra == rb) return kFloat32;  // bfloat16 with float16: neither holds the other
  return ra > rb ? a : b;
}

}  // namespace loom
