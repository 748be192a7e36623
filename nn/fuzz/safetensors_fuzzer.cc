// libFuzzer target for the safetensors reader: any byte string must either
// parse or raise loom::Error — never crash, hang or read out of bounds
// (AddressSanitizer checks the last). Built outside Bazel by tools/fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nn/safetensors.h"
#include "tensor/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A buffer of exactly `size` bytes: a read past the end is caught.
  std::vector<uint8_t> file(data, data + size);
  try {
    loom::nn::SafetensorsHeader header = loom::nn::parse_safetensors_header(file.data(), file.size(), "fuzz input");
    for (const auto& e : header.entries) {  // decode every accepted tensor
      size_t bytes;
      loom::DType loads_as;
      loom::nn::safetensors_dtype(e.dtype, &bytes, &loads_as);
      const size_t count = (e.end - e.begin) / bytes;
      std::vector<uint8_t> out(count * loom::element_size(loads_as) + 1);
      loom::nn::decode_elements(e.dtype, file.data() + header.data_start + e.begin, count, out.data());
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
