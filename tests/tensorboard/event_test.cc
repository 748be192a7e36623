// CRC-32C against published check values, and the records and Event
// messages against bytes worked out by hand from protobuf's wire format.
#include "tensorboard/event.h"

#include <gtest/gtest.h>

#include <string>

#include "tensorboard/crc32c.h"
#include "tests/tensorboard/event_reader.h"
#include "tests/test_util.h"

namespace loom::tensorboard {
namespace {

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST(Crc32c, MatchesThePublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  // RFC 3720 (iSCSI), appendix B.4: 32 bytes of zeros, of ones, and 0..31.
  std::string zeros(32, '\0'), ones(32, '\xff'), counting;
  for (int i = 0; i < 32; ++i) counting.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(counting.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c("", 0), 0u);
}

TEST(Crc32c, MaskRotatesAndAddsTensorFlowsConstant) {
  EXPECT_EQ(mask_crc32c(0), 0xA282EAD8u);
  // 0x00008000 rotated right by 15 is 1; 1 + 0xA282EAD8.
  EXPECT_EQ(mask_crc32c(0x8000), 0xA282EAD9u);
  // 1 rotated right by 15 is 1 << 17.
  EXPECT_EQ(mask_crc32c(1), 0xA282EAD8u + (1u << 17));
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) EXPECT_EQ(unmask_crc32c(mask_crc32c(crc)), crc);
}

TEST(Event, ScalarIsTheBytesProtobufWouldWrite) {
  const std::string expected = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F,  // wall_time = 1.5 (double 0x3FF8000000000000)
                                      0x10, 0x03,                          // step = 3
                                      0x2A, 0x0A,                          // summary: 10 bytes
                                      0x0A, 0x08,                          //   value: 8 bytes
                                      0x0A, 0x01, 'a',                     //     tag = "a"
                                      0x15, 0, 0, 0, 0x40});               //     simple_value = 2.0f (0x40000000)
  EXPECT_EQ(scalar_event(1.5, 3, "a", 2.0f), expected);
}

TEST(Event, FileVersionComesFirstWithStepZero) {
  const std::string expected = bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0,  // wall_time = 0.0
                                      0x10, 0x00,                    // step = 0
                                      0x1A, 0x0D}) +                 // file_version: 13 bytes
                               "brain.Event:2";
  EXPECT_EQ(file_version_event(0), expected);
}

TEST(Event, NegativeStepIsTenVarintBytesAsProtobufEncodesInt64) {
  const std::string e = scalar_event(0, -1, "t", 0);
  EXPECT_EQ(e.substr(9, 11), bytes({0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}));
  EXPECT_EQ(testing::decode_event(e).step, -1);
}

TEST(Event, LongTagsTakeATwoByteLength) {
  const std::string tag(200, 'x');  // 200 = 0xC8: varint C8 01
  const testing::ReadEvent e = testing::decode_event(scalar_event(0, 7, tag, 0.25f));
  ASSERT_EQ(e.values.size(), 1u);
  EXPECT_EQ(e.values[0].tag, tag);
  EXPECT_EQ(e.values[0].simple_value, 0.25f);
}

TEST(Record, FramesDataWithItsLengthAndTwoMaskedCrcs) {
  const std::string data = "hello";
  const std::string r = record(data);
  ASSERT_EQ(r.size(), 8 + 4 + 5 + 4u);
  EXPECT_EQ(r.substr(0, 8), bytes({5, 0, 0, 0, 0, 0, 0, 0}));  // uint64 little-endian
  uint32_t length_crc, data_crc;
  std::memcpy(&length_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 17, 4);
  EXPECT_EQ(length_crc, mask_crc32c(crc32c(r.data(), 8)));
  EXPECT_EQ(r.substr(12, 5), data);
  EXPECT_EQ(data_crc, mask_crc32c(crc32c("hello", 5)));
}

TEST(Record, AFlippedBitFailsItsCrc) {
  std::string r = record(scalar_event(1, 2, "loss", 0.5f));
  EXPECT_EQ(testing::read_records(r).size(), 1u);
  r[20] ^= 0x04;
  try {
    testing::read_records(r);
    ADD_FAILURE() << "a flipped bit passed the CRC";
  } catch (const std::runtime_error& e) {  // the tests' reader's error, not loom's
    EXPECT_STREQ(e.what(), "bad data CRC at offset 0");
  }
}

TEST(Record, AFileCutAnywhereReadsAsItsWholeRecords) {
  // What a reader sees if it looks while a write is under way: every cut
  // gives the complete records before it and a torn tail, never a bad CRC.
  const std::string a = record(file_version_event(1)), b = record(scalar_event(2, 1, "lr", 0.1f));
  const std::string file = a + b;
  for (size_t cut = 0; cut <= file.size(); ++cut) {
    bool torn = false;
    const auto records = testing::read_records(file.substr(0, cut), &torn);
    const size_t whole = cut >= file.size() ? 2 : cut >= a.size() ? 1 : 0;
    EXPECT_EQ(records.size(), whole) << "cut at " << cut;
    EXPECT_EQ(torn, cut != 0 && cut != a.size() && cut != file.size()) << "cut at " << cut;
  }
}

TEST(Histogram, EqualBucketsFromLeastToGreatest) {
  // 0..9 in 5 buckets of width 9/5 = 1.8: {0,1} {2,3} {4,5} {6,7} {8,9}.
  const Histogram h = make_histogram({9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, 5);
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 9);
  EXPECT_EQ(h.num, 10);
  EXPECT_EQ(h.sum, 45);
  EXPECT_EQ(h.sum_squares, 285);  // 0 + 1 + 4 + ... + 81
  ASSERT_EQ(h.bucket_limit.size(), 5u);
  EXPECT_NEAR(h.bucket_limit[0], 1.8, 1e-12);
  EXPECT_NEAR(h.bucket_limit[3], 7.2, 1e-12);
  EXPECT_EQ(h.bucket_limit[4], 9);
  EXPECT_EQ(h.bucket, std::vector<double>({2, 2, 2, 2, 2}));
}

TEST(Histogram, EncodesEveryField) {
  const testing::ReadEvent e = testing::decode_event(histogram_event(3, 4, "w", make_histogram({1, 1, 3}, 2)));
  ASSERT_EQ(e.values.size(), 1u);
  EXPECT_EQ(e.values[0].tag, "w");
  EXPECT_FALSE(e.values[0].has_simple_value);
  EXPECT_EQ(e.values[0].histo, std::vector<double>({1, 3, 3, 5, 11}));  // min max num sum sum_squares
  EXPECT_EQ(e.values[0].bucket_limit, std::vector<double>({2, 3}));
  EXPECT_EQ(e.values[0].bucket, std::vector<double>({2, 1}));
}

TEST(Histogram, RefusesNoBuckets) { EXPECT_THROW_MSG(make_histogram({1}, 0), "make_histogram: 0 buckets"); }

}  // namespace
}  // namespace loom::tensorboard
