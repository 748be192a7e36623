// The IDX parser on in-memory files written byte by byte from the format:
// magic 00 00 <type code> <rank>, rank big-endian uint32 dims, big-endian data.
#include "data/idx_parser.h"

#include <gtest/gtest.h>

#include <cstring>

#include "tests/data/test_files.h"
#include "tests/test_util.h"

namespace loom::data {
namespace {

using testing::Bytes;

IdxArray parse(const Bytes& b) { return parse_idx(b.data(), b.size()); }

template <typename T>
std::vector<T> decoded(const Bytes& b) {
  IdxArray a = parse(b);
  std::vector<T> out(static_cast<size_t>(a.header.numel));
  decode_idx(a, out.data());
  return out;
}

TEST(IdxParser, Uint8Matrix) {
  const Bytes file = {0x00, 0x00, 0x08, 0x02,  // uint8, rank 2
                      0x00, 0x00, 0x00, 0x02,  // 2 rows
                      0x00, 0x00, 0x00, 0x03,  // 3 columns
                      1,    2,    3,    250,  251, 255};
  IdxArray a = parse(file);
  EXPECT_EQ(a.header.type, IdxType::UInt8);
  EXPECT_EQ(a.header.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.header.numel, 6);
  EXPECT_EQ(a.header.header_bytes, 12u);
  EXPECT_EQ(a.header.data_bytes, 6u);
  EXPECT_EQ(a.data, file.data() + 12);  // a view, not a copy
  EXPECT_EQ(idx_loaded_dtype(a.header.type), kUInt8);
  EXPECT_EQ(decoded<uint8_t>(file), (std::vector<uint8_t>{1, 2, 3, 250, 251, 255}));
}

TEST(IdxParser, SignedIntegersWidenToInt64) {
  const Bytes i8 = {0x00, 0x00, 0x09, 0x01, 0x00, 0x00, 0x00, 0x03, 0xff, 0x7f, 0x80};
  EXPECT_EQ(decoded<int64_t>(i8), (std::vector<int64_t>{-1, 127, -128}));
  const Bytes i16 = {0x00, 0x00, 0x0b, 0x01, 0x00, 0x00, 0x00, 0x02, 0x80, 0x00, 0x12, 0x34};
  EXPECT_EQ(decoded<int64_t>(i16), (std::vector<int64_t>{-32768, 0x1234}));
  const Bytes i32 = {0x00, 0x00, 0x0c, 0x01, 0x00, 0x00, 0x00, 0x02,
                     0xff, 0xff, 0xff, 0xfe, 0x01, 0x02, 0x03, 0x04};
  EXPECT_EQ(decoded<int64_t>(i32), (std::vector<int64_t>{-2, 0x01020304}));
  EXPECT_EQ(idx_loaded_dtype(IdxType::Int8), kInt64);
  EXPECT_EQ(idx_loaded_dtype(IdxType::Int16), kInt64);
  EXPECT_EQ(idx_loaded_dtype(IdxType::Int32), kInt64);
}

TEST(IdxParser, FloatsAreBigEndianIeee) {
  // 1.0f = 0x3f800000, -pi (float) = 0xc0490fdb.
  const Bytes f32 = {0x00, 0x00, 0x0d, 0x01, 0x00, 0x00, 0x00, 0x02,
                     0x3f, 0x80, 0x00, 0x00, 0xc0, 0x49, 0x0f, 0xdb};
  EXPECT_EQ(decoded<float>(f32), (std::vector<float>{1.0f, -3.14159274f}));
  // pi (double) = 0x400921fb54442d18; shape [1, 1].
  const Bytes f64 = {0x00, 0x00, 0x0e, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
                     0x00, 0x01, 0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18};
  EXPECT_EQ(decoded<double>(f64), (std::vector<double>{3.141592653589793}));
}

TEST(IdxParser, ZeroSizedDimensionIsAnEmptyArray) {
  const Bytes file = {0x00, 0x00, 0x08, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05};
  IdxArray a = parse(file);
  EXPECT_EQ(a.header.numel, 0);
  EXPECT_EQ(a.header.dims, (std::vector<int64_t>{0, 5}));
  // A zero dim makes the array empty however large the others are: no overflow.
  const Bytes huge = {0x00, 0x00, 0x0e, 0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(parse(huge).header.numel, 0);
}

TEST(IdxParser, HeaderAloneGivesTheShape) {
  // What a reader does before it has the data: 16 header bytes of a 60000x28x28 file.
  const Bytes head = {0x00, 0x00, 0x08, 0x03, 0x00, 0x00, 0xea, 0x60,
                      0x00, 0x00, 0x00, 0x1c, 0x00, 0x00, 0x00, 0x1c};
  IdxHeader h = parse_idx_header(head.data(), head.size());
  EXPECT_EQ(h.dims, (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(h.data_bytes, 47040000u);
  EXPECT_THROW_MSG(parse(head),
                   "truncated data: dims [60000, 28, 28] of uint8 need 47040000 bytes "
                   "after the 16-byte header, but only 0 follow");
}

TEST(IdxParser, EmptyAndShortFiles) {
  EXPECT_THROW_MSG(parse({}), "parse_idx: the file is empty (0 bytes)");
  EXPECT_THROW_MSG(parse({0x00, 0x00, 0x08}),
                   "truncated header: 3 bytes, but the magic alone needs 4");
  EXPECT_THROW_MSG(parse({0x00, 0x00, 0x08, 0x03, 0x00, 0x00, 0x00, 0x01}),
                   "truncated header: rank 3 needs 16 header bytes, but the file has 8");
}

TEST(IdxParser, BadMagic) {
  EXPECT_THROW_MSG(parse({0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x00, 0x00}),
                   "bad magic 0x01000801: an IDX file starts with two zero bytes");
  // A gzip file handed over without decompressing it.
  EXPECT_THROW_MSG(parse({0x1f, 0x8b, 0x08, 0x08, 0x00, 0x00, 0x00, 0x00}), "bad magic 0x1f8b0808");
}

TEST(IdxParser, UnknownTypeCode) {
  EXPECT_THROW_MSG(parse({0x00, 0x00, 0x0a, 0x01, 0x00, 0x00, 0x00, 0x00}),
                   "unknown element type code 0x0a in the magic 0x00000a01");
  EXPECT_THROW_MSG(parse({0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00}),
                   "unknown element type code 0x00");
}

TEST(IdxParser, BadRank) {
  EXPECT_THROW_MSG(parse({0x00, 0x00, 0x08, 0x00, 0x05}), "bad rank 0 in the magic 0x00000800");
  Bytes nine = {0x00, 0x00, 0x08, 0x09};
  for (int d = 0; d < 9; ++d) testing::put_be32(nine, 1);
  nine.push_back(7);
  EXPECT_THROW_MSG(parse(nine),
                   "bad rank 9 in the magic 0x00000809 (loom supports 1 to 8 dimensions)");
}

TEST(IdxParser, TruncatedAndTrailingData) {
  Bytes file = testing::idx_uint8({2, 3}, {1, 2, 3, 4, 5, 6});
  file.pop_back();
  EXPECT_THROW_MSG(parse(file),
                   "parse_idx: truncated data: dims [2, 3] of uint8 need 6 bytes after "
                   "the 12-byte header, but only 5 follow");
  file.push_back(6);
  file.push_back(7);
  EXPECT_THROW_MSG(parse(file),
                   "parse_idx: trailing bytes: dims [2, 3] of uint8 need 6 bytes after "
                   "the 12-byte header, but 7 follow (1 too many)");
  const Bytes f64 = {0x00, 0x00, 0x0e, 0x01, 0x00, 0x00, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_THROW_MSG(parse(f64),
                   "dims [2] of float64 need 16 bytes after the 8-byte header, but only 8 follow");
}

TEST(IdxParser, DimsWhoseSizeOverflows) {
  // 3 x (2^32 - 1) elements: more than 2^64.
  Bytes file = {0x00, 0x00, 0x08, 0x03};
  for (int d = 0; d < 3; ++d) testing::put_be32(file, 0xffffffffu);
  EXPECT_THROW_MSG(parse(file),
                   "dims [4294967295, 4294967295, 4294967295] of uint8 describe more "
                   "than 2^63 bytes of data");
  // 2^31 * 2^31 = 2^62 elements fit, but as float64 they take 2^65 bytes.
  Bytes wide = {0x00, 0x00, 0x0e, 0x02};
  testing::put_be32(wide, 0x80000000u);
  testing::put_be32(wide, 0x80000000u);
  EXPECT_THROW_MSG(parse(wide), "of float64 describe more than 2^63 bytes");
  // As uint8 they fit in the count but the data is, of course, not there.
  wide[2] = 0x08;
  EXPECT_THROW_MSG(parse(wide),
                   "truncated data: dims [2147483648, 2147483648] of uint8 need "
                   "4611686018427387904 bytes");
}

TEST(IdxParser, EveryPrefixOfAValidFileIsRejected) {
  // Cut anywhere, a file must give an error, never a read past its end (ASan
  // checks the reads: each prefix is copied into a buffer of exactly its size).
  const Bytes file = {0x00, 0x00, 0x0c, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0, 0,
                      0,    1,    0,    0,    0,    2,    0,    0,    0,    3,    0,    0,    0, 4};
  EXPECT_EQ(decoded<int64_t>(file), (std::vector<int64_t>{1, 2, 3, 4}));
  for (size_t n = 0; n < file.size(); ++n) {
    const Bytes prefix(file.begin(), file.begin() + n);
    try {
      parse(prefix);
      ADD_FAILURE() << "a " << n << "-byte prefix parsed";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                  message.find("empty") != std::string::npos)
          << message;
    }
  }
}

TEST(IdxParser, ContextStartsTheMessage) {
  EXPECT_THROW_MSG(parse_idx(nullptr, 0, "read_idx: /tmp/x.gz"),
                   "read_idx: /tmp/x.gz: the file is empty");
}

}  // namespace
}  // namespace loom::data
