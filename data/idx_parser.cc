#include "data/idx_parser.h"

#include <cstdio>
#include <cstring>
#include <limits>

#include "tensor/error.h"
#include "tensor/shape.h"

namespace loom::data {
namespace {

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint64_t read_be64(const uint8_t* p) { return (uint64_t{read_be32(p)} << 32) | read_be32(p + 4); }

std::string hex(uint32_t value, int digits) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%0*x", digits, value);
  return text;
}

bool known_type(uint8_t code) {
  switch (static_cast<IdxType>(code)) {
    case IdxType::UInt8:
    case IdxType::Int8:
    case IdxType::Int16:
    case IdxType::Int32:
    case IdxType::Float32:
    case IdxType::Float64:
      return true;
  }
  return false;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

}  // namespace

const char* idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::UInt8:
      return "uint8";
    case IdxType::Int8:
      return "int8";
    case IdxType::Int16:
      return "int16";
    case IdxType::Int32:
      return "int32";
    case IdxType::Float32:
      return "float32";
    case IdxType::Float64:
      return "float64";
  }
  return "unknown";
}

size_t idx_type_size(IdxType type) {
  switch (type) {
    case IdxType::UInt8:
    case IdxType::Int8:
      return 1;
    case IdxType::Int16:
      return 2;
    case IdxType::Int32:
    case IdxType::Float32:
      return 4;
    case IdxType::Float64:
      return 8;
  }
  LOOM_INTERNAL_ASSERT(false, "unknown IdxType ", static_cast<int>(type));
  return 0;
}

DType idx_loaded_dtype(IdxType type) {
  switch (type) {
    case IdxType::UInt8:
      return kUInt8;
    case IdxType::Int8:
    case IdxType::Int16:
    case IdxType::Int32:
      return kInt64;
    case IdxType::Float32:
      return kFloat32;
    case IdxType::Float64:
      return kFloat64;
  }
  LOOM_INTERNAL_ASSERT(false, "unknown IdxType ", static_cast<int>(type));
  return kUInt8;
}

IdxHeader parse_idx_header(const uint8_t* bytes, size_t size, const std::string& context) {
  LOOM_CHECK(size > 0, context,
             ": the file is empty (0 bytes); an IDX file starts with a 4-byte magic");
  LOOM_CHECK(size >= 4, context, ": truncated header: ", size,
             " bytes, but the magic alone needs 4");
  const uint32_t magic = read_be32(bytes);
  LOOM_CHECK(bytes[0] == 0 && bytes[1] == 0, context, ": bad magic ", hex(magic, 8),
             ": an IDX file starts with two zero bytes");
  LOOM_CHECK(known_type(bytes[2]), context, ": unknown element type code ", hex(bytes[2], 2),
             " in the magic ", hex(magic, 8),
             " (known: 0x08 uint8, 0x09 int8, 0x0b int16, 0x0c int32, 0x0d float32, 0x0e float64)");
  const int rank = bytes[3];
  LOOM_CHECK(rank >= 1 && rank <= kMaxDims, context, ": bad rank ", rank, " in the magic ",
             hex(magic, 8), " (loom supports 1 to ", kMaxDims, " dimensions)");

  IdxHeader header;
  header.type = static_cast<IdxType>(bytes[2]);
  header.header_bytes = 4 + 4 * static_cast<size_t>(rank);
  LOOM_CHECK(size >= header.header_bytes, context, ": truncated header: rank ", rank, " needs ",
             header.header_bytes, " header bytes, but the file has ", size);

  // Each dim is < 2^32, but their product (times the element size) can pass
  // 2^63; a zero dim makes the array empty however large the others are.
  bool empty = false;
  uint64_t numel = 1;
  bool overflow = false;
  for (int d = 0; d < rank; ++d) {
    const uint32_t dim = read_be32(bytes + 4 + 4 * d);
    header.dims.push_back(dim);
    empty = empty || dim == 0;
    overflow = overflow || __builtin_mul_overflow(numel, uint64_t{dim}, &numel);
  }
  uint64_t data_bytes = 0;
  if (empty) {
    numel = 0;
  } else {
    overflow = overflow || __builtin_mul_overflow(numel, idx_type_size(header.type), &data_bytes);
    constexpr auto kLimit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    LOOM_CHECK(
        !overflow && data_bytes <= kLimit && data_bytes <= std::numeric_limits<size_t>::max(),
        context, ": dims ", dims_text(header.dims), " of ", idx_type_name(header.type),
        " describe more than 2^63 bytes of data");
  }
  header.numel = static_cast<int64_t>(numel);
  header.data_bytes = static_cast<size_t>(data_bytes);
  return header;
}

IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& context) {
  IdxArray array;
  array.header = parse_idx_header(bytes, size, context);
  const IdxHeader& h = array.header;
  const size_t follow = size - h.header_bytes;  // parse_idx_header checked size >= header_bytes
  LOOM_CHECK(follow >= h.data_bytes, context, ": truncated data: dims ", dims_text(h.dims), " of ",
             idx_type_name(h.type), " need ", h.data_bytes, " bytes after the ", h.header_bytes,
             "-byte header, but only ", follow, " follow");
  LOOM_CHECK(follow == h.data_bytes, context, ": trailing bytes: dims ", dims_text(h.dims), " of ",
             idx_type_name(h.type), " need ", h.data_bytes, " bytes after the ", h.header_bytes,
             "-byte header, but ", follow, " follow (", follow - h.data_bytes, " too many)");
  array.data = bytes + h.header_bytes;
  return array;
}

void decode_idx(const IdxArray& array, void* out) {
  const uint8_t* in = array.data;
  const int64_t n = array.header.numel;
  switch (array.header.type) {
    case IdxType::UInt8:
      if (n > 0) std::memcpy(out, in, static_cast<size_t>(n));
      return;
    case IdxType::Int8: {
      auto* o = static_cast<int64_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int8_t>(in[i]);
      return;
    }
    case IdxType::Int16: {
      auto* o = static_cast<int64_t*>(out);
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<int16_t>(static_cast<uint16_t>((in[2 * i] << 8) | in[2 * i + 1]));
      return;
    }
    case IdxType::Int32: {
      auto* o = static_cast<int64_t*>(out);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int32_t>(read_be32(in + 4 * i));
      return;
    }
    case IdxType::Float32: {
      auto* o = static_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t bits = read_be32(in + 4 * i);
        std::memcpy(o + i, &bits, sizeof(bits));
      }
      return;
    }
    case IdxType::Float64: {
      auto* o = static_cast<double*>(out);
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t bits = read_be64(in + 8 * i);
        std::memcpy(o + i, &bits, sizeof(bits));
      }
      return;
    }
  }
  LOOM_INTERNAL_ASSERT(false, "unknown IdxType ", static_cast<int>(array.header.type));
}

}  // namespace loom::data
