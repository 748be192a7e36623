// libFuzzer target for the IDX parser (built by tools/fuzz.sh, not Bazel).
//
// Any bytes must either parse, and then decode while reading only inside the
// buffer (AddressSanitizer watches), or throw loom::Error. A parsed header
// must also describe the input exactly; a mismatch is a parser bug and traps.
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/idx_parser.h"
#include "tensor/error.h"

using loom::data::IdxArray;

namespace {

void expect(bool condition) {
  if (!condition) __builtin_trap();
}

void check_consistent(const IdxArray& a, const uint8_t* data, size_t size) {
  const auto& h = a.header;
  expect(h.dims.size() == data[3]);
  expect(h.header_bytes == 4 + 4 * h.dims.size());
  expect(h.header_bytes + h.data_bytes == size);
  expect(a.data == data + h.header_bytes);
  uint64_t numel = 1;
  for (int64_t d : h.dims) numel *= static_cast<uint64_t>(d);  // cannot overflow: data_bytes fits
  expect(numel == static_cast<uint64_t>(h.numel));
  expect(numel * loom::data::idx_type_size(h.type) == h.data_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes, so that ASan flags any read past the end
  // (libFuzzer's own buffer may be followed by readable memory).
  std::vector<uint8_t> bytes(data, data + size);
  try {
    IdxArray a = loom::data::parse_idx(bytes.data(), bytes.size(), "fuzz");
    check_consistent(a, bytes.data(), bytes.size());
    const size_t out_bytes = static_cast<size_t>(a.header.numel) *
                             loom::element_size(loom::data::idx_loaded_dtype(a.header.type));
    std::vector<uint64_t> out((out_bytes + 7) / 8);  // 8-byte aligned, as a tensor's memory is
    loom::data::decode_idx(a, out.data());
  } catch (const loom::Error&) {
    // A rejected input: what the parser must do with garbage.
  }
  return 0;
}
