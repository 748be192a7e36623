// The safetensors format itself, apart from tensors: parsing and validating a
// file's header, and converting element bytes. nn/checkpoint.h builds tensors
// on it; the fuzzer (nn/fuzz/) calls it directly.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data; each tensor's little-endian bytes lie at its offsets,
// relative to the end of the header, and together they tile the data exactly.
//
// Integrity: loom records a CRC-32 of each tensor (its dtype, shape and
// bytes) in the metadata as "loom.crc32:<name>", and one of all the other
// metadata as "loom.crc32:__metadata__", so that a flipped bit, a relabelled
// dtype or a dropped tensor is an error rather than a silently different
// model. Other readers ignore these entries; files without them (PyTorch's)
// load unchecked.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace loom::nn {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as in the file: "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data order
  std::map<std::string, std::string> metadata;  // without loom's checksum entries
  uint64_t data_start = 0;  // offset of the data section in the file
  bool checksummed = false;  // the file carried loom's checksums, and every one matched
  // Between parse_safetensors_header_json and verify_safetensors_checksums:
  // loom's checksum entries, not yet checked.
  std::map<std::string, std::string> checksums{};
};

// Checks everything the format requires against a file of `size` bytes; the
// entries then point only inside it; checksums, where present, must match.
// `origin` names the file in errors. It is the three steps below in turn.
SafetensorsHeader parse_safetensors_header(const uint8_t* file, size_t size, const std::string& origin);

// The steps, for a reader that reads a file in pieces (nn::load_safetensors):
// each needs only what the one before it has checked, so a file that is not a
// checkpoint is refused after its first 8 bytes, before its header or data is read.
//
// The header's length from the file's first `available` bytes (8 are
// needed), checked against the file's `file_size` and the format's limit.
uint64_t safetensors_header_length(const uint8_t* start, size_t available, uint64_t file_size,
                                   const std::string& origin);
// The header from its `bytes` bytes of JSON, every entry checked against the
// data a file of `file_size` bytes has after it; the checksums are not yet checked.
SafetensorsHeader parse_safetensors_header_json(const uint8_t* json, uint64_t bytes, uint64_t file_size,
                                                const std::string& origin);
// Checks header.checksums against the data section (where the file has them)
// and sets header.checksummed.
void verify_safetensors_checksums(SafetensorsHeader& header, const uint8_t* data, const std::string& origin);

// The checksum entries save_safetensors adds to the metadata: one per tensor,
// {"loom.crc32:<name>", "<8 hex digits>"} over its dtype, shape and `size`
// bytes, and last the metadata's own, over every other entry.
std::pair<std::string, std::string> tensor_checksum_entry(const std::string& name, const std::string& dtype,
                                                          const std::vector<int64_t>& shape, const void* bytes,
                                                          size_t size);
std::pair<std::string, std::string> metadata_checksum_entry(const std::map<std::string, std::string>& metadata);

// The file dtypes loom reads, with their size and the dtype they load as
// (F16 and BF16 as float16 and bfloat16, I32 as int64). False for others.
bool safetensors_dtype(const std::string& dtype, size_t* bytes, DType* loads_as);
// The file dtype loom writes for `dtype`.
const char* safetensors_dtype_name(DType dtype);

// Converts `count` elements of file dtype `dtype` at `src` into the loaded
// dtype's representation at `dst`.
void decode_elements(const std::string& dtype, const uint8_t* src, size_t count, void* dst);

}  // namespace loom::nn
