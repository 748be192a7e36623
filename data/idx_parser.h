// The byte-level parser of IDX files, the format of MNIST and Fashion-MNIST.
//
// An IDX file is a 4-byte magic (two zero bytes, a type code, the rank), one
// big-endian uint32 per dimension, then the elements in row-major order, each
// big-endian. This parser works on bytes already in memory, checks everything
// (magic, type code, rank, dims that overflow, data that is short or too long)
// and never reads outside [bytes, bytes + size). It needs no tensors, so the
// fuzzer (data/fuzz/idx_fuzzer.cc) builds it on its own; data/idx.h turns its
// result into a Tensor and reads files.
//
//   IdxArray a = parse_idx(buffer.data(), buffer.size());   // throws loom::Error
//   std::vector<int64_t> labels(a.header.numel);             // int8/16/32 decode to int64
//   decode_idx(a, labels.data());
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace loom::data {

// Element types; the value is the type code in the magic's third byte.
enum class IdxType : uint8_t {
  UInt8 = 0x08,
  Int8 = 0x09,
  Int16 = 0x0B,
  Int32 = 0x0C,
  Float32 = 0x0D,
  Float64 = 0x0E,
};

const char* idx_type_name(IdxType type);  // "uint8", "int16", ...
size_t idx_type_size(IdxType type);       // bytes per element in the file
// The dtype loom loads a type as: uint8, float32 and float64 keep theirs; loom
// has no narrow signed types, so int8, int16 and int32 widen to int64.
DType idx_loaded_dtype(IdxType type);

struct IdxHeader {
  IdxType type = IdxType::UInt8;
  std::vector<int64_t> dims;  // rank 1..kMaxDims, each < 2^32
  int64_t numel = 0;          // product of dims
  size_t header_bytes = 0;    // 4 + 4 * rank
  size_t data_bytes = 0;      // numel * idx_type_size(type)
};

// A validated IDX file held in memory: `data` points into the caller's buffer
// at exactly header.data_bytes big-endian bytes (no copy is made).
struct IdxArray {
  IdxHeader header;
  const uint8_t* data = nullptr;
};

// Parses the magic and the dims from the start of `bytes`; the data may be
// missing (a reader calls this before it has read the data). `context` starts
// every error message, e.g. "read_idx: /path/file.gz".
IdxHeader parse_idx_header(const uint8_t* bytes, size_t size,
                           const std::string& context = "parse_idx");

// Parses a whole IDX file: the header, then checks that exactly
// header.data_bytes follow it (no truncation, no trailing bytes).
IdxArray parse_idx(const uint8_t* bytes, size_t size, const std::string& context = "parse_idx");

// Writes the array's numel elements, converted from big-endian to host order,
// to `out` as values of idx_loaded_dtype(type).
void decode_idx(const IdxArray& array, void* out);

}  // namespace loom::data
