// Helpers for the data tests: temporary files written byte by byte, raw or
// gzip-compressed (with zlib directly, not through loom's reader).
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace loom::testing {

using Bytes = std::vector<uint8_t>;

// A fresh path under the test's temporary folder (Bazel's TEST_TMPDIR).
inline std::string temp_path(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

inline void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "could not write " << path;
}

inline void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << "could not open " << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

inline Bytes read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Appends v as 4 big-endian bytes, as IDX stores dims.
inline void put_be32(Bytes& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(static_cast<uint8_t>(v >> shift));
}

// An IDX file of uint8 values: magic 00 00 08 rank, dims, then the bytes.
inline Bytes idx_uint8(const std::vector<uint32_t>& dims, const Bytes& values) {
  Bytes b = {0x00, 0x00, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), values.begin(), values.end());
  return b;
}

}  // namespace loom::testing
