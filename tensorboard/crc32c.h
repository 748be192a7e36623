// CRC-32C (Castagnoli), the checksum of TensorBoard's event files (as of
// TFRecord files), and the "masked" form those files store.
//
//   uint32_t crc = crc32c("123456789", 9);       // 0xE3069283
//   uint32_t stored = masked_crc32c(data, size);  // what a record carries
//
// The mask (rotate right by 15, add a constant) is TensorFlow's
// (tensorflow/core/lib/hash/crc32c.h): a CRC computed over data that itself
// holds CRCs is otherwise weak. A byte-at-a-time table: an event file is a
// few hundred bytes per logged step, so speed does not matter here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::tensorboard {

// The CRC-32C of `bytes` bytes at `data` (reflected polynomial 0x82F63B78,
// initial value and final xor 0xFFFFFFFF, as iSCSI and ext4 use it).
uint32_t crc32c(const void* data, size_t bytes);

uint32_t mask_crc32c(uint32_t crc);
uint32_t unmask_crc32c(uint32_t masked);
inline uint32_t masked_crc32c(const void* data, size_t bytes) { return mask_crc32c(crc32c(data, bytes)); }

}  // namespace loom::tensorboard
