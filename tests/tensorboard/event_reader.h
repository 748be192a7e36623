// A small event-file reader for the tests, written apart from the writer:
// it walks the records, checks both CRCs of each, and decodes the Event
// fields the writer uses by protobuf's wire format, skipping any others.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensorboard/crc32c.h"

namespace loom::testing {

struct ReadValue {
  std::string tag;
  bool has_simple_value = false;
  float simple_value = 0;
  std::vector<double> histo;  // min, max, num, sum, sum_squares
  std::vector<double> bucket_limit, bucket;
};

struct ReadEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<ReadValue> values;
};

class WireReader {
 public:
  explicit WireReader(const std::string& bytes) : s_(bytes) {}
  bool done() const { return at_ == s_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(byte());
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  template <typename T>
  T fixed() {
    T v;
    std::memcpy(&v, take(sizeof(T)).data(), sizeof(T));
    return v;
  }
  std::string bytes() { return take(varint()); }
  void skip(int wire_type) {
    if (wire_type == 0) varint();
    else if (wire_type == 1) take(8);
    else if (wire_type == 2) bytes();
    else if (wire_type == 5) take(4);
    else throw std::runtime_error("wire type " + std::to_string(wire_type));
  }

 private:
  char byte() { return take(1)[0]; }
  std::string take(uint64_t n) {
    if (n > s_.size() - at_) throw std::runtime_error("field runs past the message's end");
    std::string out = s_.substr(at_, n);
    at_ += n;
    return out;
  }
  const std::string& s_;
  size_t at_ = 0;
};

inline std::vector<double> packed_doubles(const std::string& bytes) {
  std::vector<double> out(bytes.size() / 8);
  std::memcpy(out.data(), bytes.data(), out.size() * 8);
  return out;
}

inline ReadValue decode_value(const std::string& bytes) {
  ReadValue v;
  WireReader r(bytes);
  while (!r.done()) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 2) v.tag = r.bytes();
    else if (field == 2 && type == 5) v.has_simple_value = true, v.simple_value = r.fixed<float>();
    else if (field == 5 && type == 2) {
      const std::string histo = r.bytes();
      WireReader h(histo);
      v.histo.assign(5, 0);
      while (!h.done()) {
        const uint64_t k = h.varint();
        const int f = static_cast<int>(k >> 3), t = static_cast<int>(k & 7);
        if (f >= 1 && f <= 5 && t == 1) v.histo[f - 1] = h.fixed<double>();
        else if (f == 6 && t == 2) v.bucket_limit = packed_doubles(h.bytes());
        else if (f == 7 && t == 2) v.bucket = packed_doubles(h.bytes());
        else h.skip(t);
      }
    } else r.skip(type);
  }
  return v;
}

inline ReadEvent decode_event(const std::string& bytes) {
  ReadEvent e;
  WireReader r(bytes);
  while (!r.done()) {
    const uint64_t key = r.varint();
    const int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (field == 1 && type == 1) e.wall_time = r.fixed<double>();
    else if (field == 2 && type == 0) e.step = static_cast<int64_t>(r.varint());
    else if (field == 3 && type == 2) e.file_version = r.bytes();
    else if (field == 5 && type == 2) {
      const std::string summary = r.bytes();
      WireReader s(summary);
      while (!s.done()) {
        const uint64_t k = s.varint();
        if ((k >> 3) == 1 && (k & 7) == 2) e.values.push_back(decode_value(s.bytes()));
        else s.skip(static_cast<int>(k & 7));
      }
    } else r.skip(type);
  }
  return e;
}

// The records' data, each checked against both of its CRCs. A record cut
// short at the end (a reader racing the writer) ends the list, as
// TensorBoard's reader stops there until the file grows.
inline std::vector<std::string> read_records(const std::string& file, bool* torn_tail = nullptr) {
  std::vector<std::string> out;
  size_t at = 0;
  if (torn_tail) *torn_tail = false;
  while (at < file.size()) {
    if (file.size() - at < 12) break;
    uint64_t length;
    uint32_t length_crc;
    std::memcpy(&length, file.data() + at, 8);
    std::memcpy(&length_crc, file.data() + at + 8, 4);
    if (length_crc != tensorboard::masked_crc32c(file.data() + at, 8))
      throw std::runtime_error("bad length CRC at offset " + std::to_string(at));
    if (file.size() - at - 12 < length + 4) break;
    const std::string data = file.substr(at + 12, length);
    uint32_t data_crc;
    std::memcpy(&data_crc, file.data() + at + 12 + length, 4);
    if (data_crc != tensorboard::masked_crc32c(data.data(), data.size()))
      throw std::runtime_error("bad data CRC at offset " + std::to_string(at));
    out.push_back(data);
    at += 12 + length + 4;
  }
  if (torn_tail) *torn_tail = at < file.size();
  return out;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<ReadEvent> read_events(const std::string& path) {
  std::vector<ReadEvent> out;
  for (const std::string& r : read_records(slurp(path))) out.push_back(decode_event(r));
  return out;
}

}  // namespace loom::testing
