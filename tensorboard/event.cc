#include "tensorboard/event.h"

#include <algorithm>
#include <cstring>

#include "tensor/error.h"
#include "tensorboard/crc32c.h"

namespace loom::tensorboard {
namespace {

// Protobuf's wire types (developers.google.com/protocol-buffers/docs/encoding).
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

// Little-endian, as protobuf's fixed32/fixed64 and the record's length are.
template <typename T>
void put_little_endian(std::string& out, T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "loom writes event files on little-endian hosts only");
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_double(std::string& out, int field, double v) {
  put_tag(out, field, kFixed64);
  put_little_endian(out, v);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_packed_doubles(std::string& out, int field, const std::vector<double>& values) {
  std::string packed;
  for (double v : values) put_little_endian(packed, v);
  put_bytes(out, field, packed);
}

// Event{wall_time, step} with `rest` (already-encoded fields) after them.
std::string event(double wall_time, int64_t step, const std::string& rest) {
  std::string out;
  put_double(out, 1, wall_time);
  put_tag(out, 2, kVarint);
  put_varint(out, static_cast<uint64_t>(step));  // int64: a negative step is ten bytes, as protobuf encodes it
  return out + rest;
}

// Event.summary = Summary{value: [value]}, `value` an encoded Summary.Value.
std::string summary_event(double wall_time, int64_t step, const std::string& value) {
  std::string summary, field;
  put_bytes(summary, 1, value);
  put_bytes(field, 5, summary);
  return event(wall_time, step, field);
}

}  // namespace

Histogram make_histogram(const std::vector<double>& values, int buckets) {
  LOOM_CHECK(buckets >= 1, "make_histogram: ", buckets, " buckets; at least 1");
  Histogram h;
  if (values.empty()) return h;
  h.min = *std::min_element(values.begin(), values.end());
  h.max = *std::max_element(values.begin(), values.end());
  h.num = static_cast<double>(values.size());
  for (double v : values) {
    h.sum += v;
    h.sum_squares += v * v;
  }
  const double width = (h.max - h.min) / buckets;
  h.bucket.assign(buckets, 0);
  for (int i = 0; i < buckets; ++i) h.bucket_limit.push_back(i + 1 == buckets ? h.max : h.min + width * (i + 1));
  for (double v : values) {
    // The bucket whose interval holds v; the greatest value falls in the last.
    int i = width > 0 ? static_cast<int>((v - h.min) / width) : 0;
    h.bucket[std::clamp(i, 0, buckets - 1)] += 1;
  }
  return h;
}

std::string file_version_event(double wall_time) {
  std::string field;
  put_bytes(field, 3, kFileVersion);
  return event(wall_time, 0, field);
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_tag(v, 2, kFixed32);
  put_little_endian(v, value);
  return summary_event(wall_time, step, v);
}

std::string histogram_event(double wall_time, int64_t step, const std::string& tag, const Histogram& h) {
  LOOM_CHECK(h.bucket.size() == h.bucket_limit.size(), "histogram_event: '", tag, "' has ", h.bucket.size(),
             " buckets but ", h.bucket_limit.size(), " bucket limits");
  std::string histo;
  put_double(histo, 1, h.min);
  put_double(histo, 2, h.max);
  put_double(histo, 3, h.num);
  put_double(histo, 4, h.sum);
  put_double(histo, 5, h.sum_squares);
  put_packed_doubles(histo, 6, h.bucket_limit);
  put_packed_doubles(histo, 7, h.bucket);
  std::string v;
  put_bytes(v, 1, tag);
  put_bytes(v, 5, histo);
  return summary_event(wall_time, step, v);
}

std::string record(const std::string& data) {
  std::string out;
  put_little_endian(out, static_cast<uint64_t>(data.size()));
  put_little_endian(out, masked_crc32c(out.data(), 8));
  out += data;
  put_little_endian(out, masked_crc32c(data.data(), data.size()));
  return out;
}

}  // namespace loom::tensorboard
