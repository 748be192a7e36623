// FNV-1a: a short, stable 64-bit hash of bytes. loom uses it where a value
// must be the same on every run and every rank: a stand-in for a long file
// name, a tag for a list of sizes, a check that ranks read the same text.
// Not for security, and not for hash tables of untrusted keys.
//
//   uint64_t h = loom::fnv1a(text.data(), text.size());
//   h = loom::fnv1a(more.data(), more.size(), h);  // continues the first hash
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom {

inline constexpr uint64_t kFnv1aStart = 14695981039346656037ull;  // the FNV offset basis

// `hash` continued over `size` bytes at `data`.
inline uint64_t fnv1a(const void* data, size_t size, uint64_t hash = kFnv1aStart) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

}  // namespace loom
