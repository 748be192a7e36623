// libFuzzer target for the safetensors reader: any byte string must either
// parse or raise loom::Error — never crash, hang or read out of bounds
// (AddressSanitizer checks the last). Built outside Bazel by tools/fuzz.sh.
#include <cstddef>
#include <cstdint>

#include "nn/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loom::nn::Checkpoint c = loom::nn::parse_safetensors(data, size, "fuzz input");
    for (auto& [name, t] : c.tensors) (void)t.numel();
  } catch (const loom::Error&) {
  }
  return 0;
}
