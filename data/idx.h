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
//
// What a file can make the reader allocate is bounded before it is read: the
// header is read first, the data it declares must be at most
// IdxReadOptions::max_data_bytes, and no more than that is ever decompressed.
// A gzip bomb (a few MB that expand to gigabytes) costs its header.
#pragma once

#include <cstdint>
#include <string>

#include "data/idx_parser.h"
#include "tensor/tensor.h"

namespace loom::data {

// The values of a parsed IDX array as a new tensor of shape header.dims.
Tensor idx_to_tensor(const IdxArray& array);

struct IdxReadOptions {
  // The most data (the dims' product times the element size) a header may
  // declare. 1 GiB: Fashion-MNIST's training images are 47 MB, MNIST-like
  // sets of a million 28x28 images 784 MB.
  uint64_t max_data_bytes = uint64_t{1} << 30;
};

// The header of an IDX file, gzip'd or not, read without its data: a reader
// of several files checks that they agree before reading any of them.
IdxHeader read_idx_header(const std::string& path);

// Reads and parses an IDX file, gzip'd or not.
Tensor read_idx(const std::string& path, const IdxReadOptions& options = {});

}  // namespace loom::data
