// Checkpoints in the safetensors layout, which PyTorch (and many tools) read
// and write: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
//    "__metadata__": {"key": "value"}}
// and then the raw little-endian tensor bytes, each tensor's at its offsets.
//
//   nn::save_safetensors("model.safetensors", model->state_dict(), {{"epoch", "3"}});
//   nn::Checkpoint c = nn::load_safetensors("model.safetensors");
//   model->load_state_dict(c.tensors);
//
// Writes are atomic (tensor/file_io.h): a crash leaves either the old file or
// the new one, never half of one. Each tensor's bytes and the metadata carry
// a checksum (nn/safetensors.h). Reads take regular files only, check the
// header's length against the file before reading the header, and the whole
// header before reading the data, and verify the checksums where the file has
// them before touching any tensor data.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "nn/module.h"

namespace loom::nn {

struct Checkpoint {
  NamedTensors tensors;  // CPU tensors, in file order
  std::map<std::string, std::string> metadata;  // without loom's checksum entries
  bool checksummed = false;  // loom wrote it: every tensor and the metadata matched their checksums
};

// Tensors may live on any device; they are copied to the host to be written.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
Checkpoint load_safetensors(const std::string& path);

// Parses a whole file already in memory; `origin` names it in errors.
// F16 and BF16 tensors (common in PyTorch checkpoints) load as float16 and bfloat16
// (a model's load_state_dict converts them to its parameters' dtype), I32 as int64.
Checkpoint parse_safetensors(const uint8_t* data, size_t size, const std::string& origin);

}  // namespace loom::nn
