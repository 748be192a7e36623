#include "tensorboard/crc32c.h"

#include <array>

namespace loom::tensorboard {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;     // Castagnoli's 0x1EDC6F41, bit-reversed
constexpr uint32_t kMaskDelta = 0xA282EAD8;      // TensorFlow's mask constant

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    table[i] = crc;
  }
  return table;
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes) {
  static const std::array<uint32_t, 256> table = make_table();  // made once, thread-safe
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFF;
  for (size_t i = 0; i < bytes; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFF;
}

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t unmask_crc32c(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace loom::tensorboard
