// Reading IDX files (MNIST's format) into tensors, gzip-compressed or raw.
//
// read_idx opens a file through zlib, which reads gzip and uncompressed files
// alike, parses it with parse_idx (data/idx_parser.h) and returns a contiguous
// CPU tensor: uint8, float32 and float64 keep their type; int8, int16 and
// int32 widen to int64 (loom has no narrow signed types).
//
//   Tensor images = read_idx("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
//   // uint8, shape [10000, 28, 28]
//
// Errors (missing file, corrupt gzip stream, bad magic, truncated data, ...)
// throw loom::Error naming the file and the problem.
#pragma once

#include <string>

#include "data/idx_parser.h"
#include "tensor/tensor.h"

namespace loom::data {

// The values of a parsed IDX array as a new tensor of shape header.dims.
Tensor idx_to_tensor(const IdxArray& array);

// Reads and parses an IDX file, gzip'd or not.
Tensor read_idx(const std::string& path);

}  // namespace loom::data
