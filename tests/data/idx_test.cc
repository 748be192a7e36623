// read_idx on files written byte by byte in the test, raw and gzip'd (zlib
// directly), and on corrupt or missing files: every error names the file.
#include "data/idx.h"

#include <gtest/gtest.h>

#include "tests/data/test_files.h"
#include "tests/test_util.h"

namespace loom::data {
namespace {

using testing::Bytes;
using testing::temp_path;

const Bytes kUint8File = testing::idx_uint8({2, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 254, 255});

TEST(ReadIdx, RawAndGzipRoundTrip) {
  const std::string raw = temp_path("a-idx3-ubyte"), gz = temp_path("a-idx3-ubyte.gz");
  testing::write_raw(raw, kUint8File);
  testing::write_gzip(gz, kUint8File);
  ASSERT_NE(testing::read_raw(gz), kUint8File);  // it really is compressed
  for (const std::string& path : {raw, gz}) {
    Tensor t = read_idx(path);
    EXPECT_EQ(t.dtype(), kUInt8);
    EXPECT_EQ(t.shape(), (Shape{2, 2, 3}));
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(t.to_vector<uint8_t>(),
              (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 254, 255}));
  }
}

TEST(ReadIdx, EveryTypeThroughGzip) {
  // int16 [3]: -2, 256, 32767
  const Bytes i16 = {0x00, 0x00, 0x0b, 0x01, 0x00, 0x00, 0x00,
                     0x03, 0xff, 0xfe, 0x01, 0x00, 0x7f, 0xff};
  testing::write_gzip(temp_path("i16.gz"), i16);
  Tensor a = read_idx(temp_path("i16.gz"));
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{-2, 256, 32767}));
  // float32 [1, 2]: 0.5 (0x3f000000), -2 (0xc0000000)
  const Bytes f32 = {0x00, 0x00, 0x0d, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
                     0x00, 0x02, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00};
  testing::write_gzip(temp_path("f32.gz"), f32);
  Tensor b = read_idx(temp_path("f32.gz"));
  EXPECT_EQ(b.dtype(), kFloat32);
  EXPECT_EQ(b.shape(), (Shape{1, 2}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{0.5f, -2.0f}));
  // float64 [1]: -0.25 (0xbfd0000000000000)
  const Bytes f64 = {0x00, 0x00, 0x0e, 0x01, 0x00, 0x00, 0x00, 0x01, 0xbf, 0xd0, 0, 0, 0, 0, 0, 0};
  testing::write_raw(temp_path("f64"), f64);
  EXPECT_EQ(read_idx(temp_path("f64")).to_vector<double>(), (std::vector<double>{-0.25}));
}

TEST(ReadIdx, LargeFileCrossesReadChunks) {
  // 3 MB: the reader's 1 MiB zlib buffer refills several times; the values
  // depend on the position, so a misplaced block would show.
  const uint32_t n = 3'000'000;
  Bytes values(n);
  for (uint32_t i = 0; i < n; ++i) values[i] = static_cast<uint8_t>((i * 7 + i / 251) & 0xff);
  testing::write_gzip(temp_path("big.gz"), testing::idx_uint8({3, 1000, 1000}, values));
  Tensor t = read_idx(temp_path("big.gz"));
  ASSERT_EQ(t.shape(), (Shape{3, 1000, 1000}));
  const uint8_t* p = t.data_ptr<uint8_t>();
  EXPECT_TRUE(std::equal(values.begin(), values.end(), p));
}

TEST(ReadIdx, MissingFileOrFolder) {
  const std::string path = temp_path("nope.gz");
  EXPECT_THROW_MSG(read_idx(path), "read_idx: " + path + ": no such file");
  std::filesystem::create_directories(temp_path("a-folder"));
  EXPECT_THROW_MSG(read_idx(temp_path("a-folder")),
                   "read_idx: " + temp_path("a-folder") + ": not a regular file");
}

TEST(ReadIdx, CorruptFilesNameThePathAndTheProblem) {
  struct Case {
    const char* name;
    Bytes bytes;
    const char* problem;
  };
  Bytes truncated = kUint8File, trailing = kUint8File;
  truncated.pop_back();
  trailing.push_back(0);
  const std::vector<Case> cases = {
      {"empty", {}, "the file is empty (0 bytes)"},
      {"magic", {0xde, 0xad, 0x08, 0x01, 0x00, 0x00, 0x00, 0x00}, "bad magic 0xdead0801"},
      {"dtype", {0x00, 0x00, 0x07, 0x01, 0x00, 0x00, 0x00, 0x00}, "unknown element type code 0x07"},
      {"rank", {0x00, 0x00, 0x08, 0x00}, "bad rank 0"},
      {"header",
       {0x00, 0x00, 0x08, 0x02, 0x00, 0x00, 0x00, 0x02},
       "truncated header: rank 2 needs 12"},
      {"truncated", truncated,
       "truncated data: dims [2, 2, 3] of uint8 need 12 bytes after the "
       "16-byte header, but only 11 follow"},
      {"trailing", trailing,
       "trailing bytes: dims [2, 2, 3] of uint8 need 12 bytes after the "
       "16-byte header, but 13 follow (1 too many)"},
  };
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (gz ? " (gzip)" : " (raw)"));
      const std::string path = temp_path(std::string(c.name) + (gz ? ".gz" : ""));
      if (gz)
        testing::write_gzip(path, c.bytes);
      else
        testing::write_raw(path, c.bytes);
      EXPECT_THROW_MSG(read_idx(path), "read_idx: " + path + ": " + c.problem);
    }
  }
}

TEST(ReadIdx, ATruncatedFileClaimingHugeDataFailsWithoutAllocatingIt) {
  // The header promises 2^62 bytes; the reader must say "truncated", not try
  // to allocate 4 EiB (the buffer only grows as data arrives).
  Bytes file = {0x00, 0x00, 0x08, 0x02};
  testing::put_be32(file, 0x80000000u);
  testing::put_be32(file, 0x80000000u);
  file.insert(file.end(), 100, 7);
  testing::write_gzip(temp_path("liar.gz"), file);
  EXPECT_THROW_MSG(read_idx(temp_path("liar.gz"), {.max_data_bytes = UINT64_MAX}),
                   "need 4611686018427387904 bytes after the "
                   "12-byte header, but only 100 follow");
}

// A header that declares more data than the reader takes is refused before
// anything is decompressed: a gzip bomb (here 4 MB of zeros behind a header
// of 2,000,000 images) costs its header, not the 1.5 GB it expands to.
TEST(ReadIdx, AHeaderDeclaringMoreThanTheLimitIsRefusedBeforeDecompressing) {
  Bytes file = {0x00, 0x00, 0x08, 0x03};
  for (uint32_t d : {2000000u, 28u, 28u}) testing::put_be32(file, d);
  file.resize(file.size() + (4 << 20));
  testing::write_gzip(temp_path("bomb.gz"), file);
  EXPECT_THROW_MSG(read_idx(temp_path("bomb.gz")),
                   "read_idx: " + temp_path("bomb.gz") + ": the header declares 1568000000 bytes of data (uint8 of "
                   "shape [2000000, 28, 28]), more than the 1073741824 read_idx takes");
  EXPECT_EQ(read_idx_header(temp_path("bomb.gz")).dims, (std::vector<int64_t>{2000000, 28, 28}));
  // The limit is the caller's: exactly the declared size passes, a byte less does not.
  testing::write_gzip(temp_path("small.gz"), testing::idx_uint8({3, 4}, Bytes(12, 1)));
  EXPECT_EQ(read_idx(temp_path("small.gz"), {.max_data_bytes = 12}).numel(), 12);
  EXPECT_THROW_MSG(read_idx(temp_path("small.gz"), {.max_data_bytes = 11}), "more than the 11 read_idx takes");
}

TEST(ReadIdx, DamagedGzipStream) {
  testing::write_gzip(temp_path("good.gz"), kUint8File);
  const Bytes good = testing::read_raw(temp_path("good.gz"));
  ASSERT_GT(good.size(), 20u);
  // Cut off: the gzip trailer (CRC and length) and part of the deflate data are missing.
  const std::string cut = temp_path("cut.gz");
  testing::write_raw(cut, Bytes(good.begin(), good.end() - 10));
  EXPECT_THROW_MSG(read_idx(cut), "read_idx: " + cut + ": corrupt or truncated gzip data (zlib: ");
  // A flipped bit in the CRC-32 of the trailer: the data decompresses, the check fails.
  Bytes bad_crc = good;
  bad_crc[bad_crc.size() - 8] ^= 0x01;
  const std::string crc = temp_path("crc.gz");
  testing::write_raw(crc, bad_crc);
  EXPECT_THROW_MSG(
      read_idx(crc),
      "read_idx: " + crc + ": corrupt or truncated gzip data (zlib: incorrect data check)");
}

}  // namespace
}  // namespace loom::data
