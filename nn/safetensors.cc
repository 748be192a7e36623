#include "nn/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <zlib.h>

#include "tensor/error.h"
#include "tensor/shape.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace loom::nn {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // the format's own limit

const std::string kChecksumPrefix = "loom.crc32:";
const std::string kMetadataChecksumKey = kChecksumPrefix + "__metadata__";

uint32_t crc_of(uint32_t crc, const void* bytes, size_t size) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(bytes), size));
}

uint32_t crc_of(uint32_t crc, const std::string& text) { return crc_of(crc, text.c_str(), text.size() + 1); }

std::string hex(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", value);
  return text;
}

uint32_t tensor_checksum(const std::string& dtype, const std::vector<int64_t>& shape, const void* bytes,
                         size_t size) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ",";
  return crc_of(crc_of(crc_of(0, dtype), dims), bytes, size);
}

// Over every entry but its own, in key order (the map's).
uint32_t metadata_checksum(const std::map<std::string, std::string>& metadata) {
  uint32_t crc = 0;
  for (const auto& [key, value] : metadata)
    if (key != kMetadataChecksumKey) crc = crc_of(crc_of(crc, key), value);
  return crc;
}

// Checks `checksums` (loom's entries, all of them or none) against the
// metadata and the header's entries. Returns whether there were any.
bool verify_checksums(const std::map<std::string, std::string>& metadata,
                      const std::map<std::string, std::string>& checksums,
                      const std::vector<SafetensorsEntry>& entries, const uint8_t* data, const std::string& origin) {
  if (checksums.empty()) return false;  // not written by loom (PyTorch, say): nothing to verify
  std::map<std::string, std::string> all = metadata;  // the metadata's own checksum covers the others too
  all.insert(checksums.begin(), checksums.end());
  auto own = checksums.find(kMetadataChecksumKey);
  LOOM_CHECK(own != checksums.end() && own->second == hex(metadata_checksum(all)), "checkpoint ", origin,
             ": the metadata does not match its checksum (the header was edited or damaged)");
  std::map<std::string, std::string> sums;
  for (const auto& [key, value] : checksums)
    if (key != kMetadataChecksumKey) sums[key.substr(kChecksumPrefix.size())] = value;
  for (const SafetensorsEntry& e : entries) {
    auto sum = sums.find(e.name);
    LOOM_CHECK(sum != sums.end(), "checkpoint ", origin, ": tensor '", e.name, "' has no checksum (added to the file?)");
    LOOM_CHECK(sum->second == hex(tensor_checksum(e.dtype, e.shape, data + e.begin, e.end - e.begin)), "checkpoint ",
               origin, ": tensor '", e.name, "' does not match its checksum (the file is damaged, or its dtype or ",
               "shape was changed)");
    sums.erase(sum);
  }
  LOOM_CHECK(sums.empty(), "checkpoint ", origin, ": tensor '", sums.empty() ? "" : sums.begin()->first,
             "' has a checksum but is missing from the file");
  return true;
}

// A safetensors header nests three levels ({name: {"shape": [...]}}); a
// header nested deeper is not one, and each level would cost the parser
// memory (100 MiB of '[' takes gigabytes), so it is refused at this depth.
constexpr int kMaxHeaderDepth = 8;

// The header's JSON, rejecting duplicate top-level names (the format forbids them).
json parse_json(const uint8_t* data, size_t size, const std::string& origin) {
  std::set<std::string> names;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    // depth: the containers around the element; an object or array starting here opens one more.
    const bool opens = event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    LOOM_CHECK(!opens || depth < kMaxHeaderDepth, "checkpoint ", origin, ": the header nests JSON more than ",
               kMaxHeaderDepth, " levels deep; a safetensors header has 3 (is it a safetensors file?)");
    return true;
  };
  json header;
  try {
    header = json::parse(data, data + size, on_event);
  } catch (const json::exception& e) {
    LOOM_FAIL("checkpoint ", origin, ": the header is not valid JSON (", e.what(), ")");
  }
  LOOM_CHECK(duplicate.empty(), "checkpoint ", origin, ": tensor '", duplicate, "' appears twice in the header");
  LOOM_CHECK(header.is_object(), "checkpoint ", origin, ": the header must be a JSON object, got ", header.type_name());
  return header;
}

uint64_t as_size(const json& v, const std::string& origin, const std::string& what) {
  LOOM_CHECK(v.is_number_unsigned(), "checkpoint ", origin, ": ", what, " must be a non-negative integer, got ",
             v.dump());
  return v.get<uint64_t>();
}

}  // namespace

std::pair<std::string, std::string> tensor_checksum_entry(const std::string& name, const std::string& dtype,
                                                          const std::vector<int64_t>& shape, const void* bytes,
                                                          size_t size) {
  return {kChecksumPrefix + name, hex(tensor_checksum(dtype, shape, bytes, size))};
}

std::pair<std::string, std::string> metadata_checksum_entry(const std::map<std::string, std::string>& metadata) {
  return {kMetadataChecksumKey, hex(metadata_checksum(metadata))};
}

bool safetensors_dtype(const std::string& dtype, size_t* bytes, DType* loads_as) {
  static const std::map<std::string, std::pair<size_t, DType>> known = {
      {"BOOL", {1, kBool}}, {"U8", {1, kUInt8}},     {"I32", {4, kInt64}},   {"I64", {8, kInt64}},
      {"F16", {2, kFloat16}}, {"BF16", {2, kBFloat16}}, {"F32", {4, kFloat32}}, {"F64", {8, kFloat64}}};
  auto it = known.find(dtype);
  if (it == known.end()) return false;
  *bytes = it->second.first;
  *loads_as = it->second.second;
  return true;
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case kBool: return "BOOL";
    case kUInt8: return "U8";
    case kInt64: return "I64";
    case kFloat32: return "F32";
    case kFloat64: return "F64";
    case kBFloat16: return "BF16";
    case kFloat16: return "F16";
  }
  return "?";
}

void decode_elements(const std::string& dtype, const uint8_t* src, size_t count, void* dst) {
  if (dtype == "I32") {
    int64_t* out = static_cast<int64_t*>(dst);
    for (size_t i = 0; i < count; ++i) {
      int32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      out[i] = v;
    }
  } else {
    size_t bytes;
    DType loads_as;
    LOOM_INTERNAL_ASSERT(safetensors_dtype(dtype, &bytes, &loads_as), "unknown dtype ", dtype);
    if (count > 0) std::memcpy(dst, src, count * bytes);
  }
}

uint64_t safetensors_header_length(const uint8_t* start, size_t available, uint64_t file_size,
                                   const std::string& origin) {
  LOOM_CHECK(file_size >= 8 && available >= 8, "checkpoint ", origin, ": the file has ", file_size,
             " bytes, too short for a safetensors header length (8 bytes); is it a safetensors file?");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, start, 8);
  // The smallest header is "{}"; a file of zeros claims none.
  LOOM_CHECK(header_bytes >= 2, "checkpoint ", origin, ": the header claims ", header_bytes,
             " bytes (the file's first 8), too few for a JSON object; is it a safetensors file?");
  LOOM_CHECK(header_bytes <= kMaxHeaderBytes, "checkpoint ", origin, ": the header claims ", header_bytes,
             " bytes, more than the format's limit of ", kMaxHeaderBytes, "; is it a safetensors file?");
  LOOM_CHECK(header_bytes <= file_size - 8, "checkpoint ", origin, ": the header claims ", header_bytes,
             " bytes but the file has ", file_size - 8, " after the length (truncated, or not a safetensors file)");
  return header_bytes;
}

SafetensorsHeader parse_safetensors_header_json(const uint8_t* text, uint64_t header_bytes, uint64_t file_size,
                                                const std::string& origin) {
  json header = parse_json(text, header_bytes, origin);
  SafetensorsHeader out;
  out.data_start = 8 + header_bytes;
  LOOM_INTERNAL_ASSERT(out.data_start <= file_size, "a header of ", header_bytes, " bytes in a file of ", file_size);
  const uint64_t data_bytes = file_size - out.data_start;

  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      LOOM_CHECK(entry.is_object(), "checkpoint ", origin, ": __metadata__ must be an object of strings");
      for (auto& [key, value] : entry.items()) {
        LOOM_CHECK(value.is_string(), "checkpoint ", origin, ": metadata '", key, "' must be a string, got ",
                   value.dump());
        (key.compare(0, kChecksumPrefix.size(), kChecksumPrefix) == 0 ? out.checksums : out.metadata)[key] =
            value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    LOOM_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
               "checkpoint ", origin, ": ", where, " needs dtype, shape and data_offsets");
    LOOM_CHECK(entry["dtype"].is_string(), "checkpoint ", origin, ": ", where, " has a non-string dtype");
    SafetensorsEntry e;
    e.name = name;
    e.dtype = entry["dtype"].get<std::string>();
    size_t element_bytes;
    DType loads_as;
    LOOM_CHECK(safetensors_dtype(e.dtype, &element_bytes, &loads_as), "checkpoint ", origin, ": ", where,
               " has unsupported dtype ", e.dtype);
    LOOM_CHECK(entry["shape"].is_array() && entry["shape"].size() <= kMaxDims, "checkpoint ", origin, ": ", where,
               " needs a shape of at most ", kMaxDims, " sizes, got ", entry["shape"].dump());
    uint64_t bytes = element_bytes;
    for (const json& s : entry["shape"]) {
      const uint64_t dim = as_size(s, origin, where + " shape size");
      LOOM_CHECK(dim <= static_cast<uint64_t>(INT64_MAX) && !__builtin_mul_overflow(bytes, dim, &bytes), "checkpoint ",
                 origin, ": ", where, " shape ", entry["shape"].dump(), " is too large");
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    const json& offsets = entry["data_offsets"];
    LOOM_CHECK(offsets.is_array() && offsets.size() == 2, "checkpoint ", origin, ": ", where,
               " data_offsets must be [begin, end], got ", offsets.dump());
    e.begin = as_size(offsets[0], origin, where + " offset");
    e.end = as_size(offsets[1], origin, where + " offset");
    LOOM_CHECK(e.begin <= e.end && e.end <= data_bytes, "checkpoint ", origin, ": ", where, " data_offsets [", e.begin,
               ", ", e.end, "] lie outside the ", data_bytes, " data bytes (truncated file?)");
    LOOM_CHECK(e.end - e.begin == bytes, "checkpoint ", origin, ": ", where, " has ", e.end - e.begin, " bytes but ",
               e.dtype, " shape ", entry["shape"].dump(), " needs ", bytes);
    out.entries.push_back(std::move(e));
  }
  // The tensors must tile the data exactly: no gaps, no overlaps.
  std::sort(out.entries.begin(), out.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : out.entries) {
    LOOM_CHECK(e.begin == expected, "checkpoint ", origin, ": tensor '", e.name, "' starts at byte ", e.begin,
               ", expected ", expected, " (tensors overlap or leave a gap)");
    expected = e.end;
  }
  LOOM_CHECK(expected == data_bytes, "checkpoint ", origin, ": ", data_bytes - expected,
             " bytes after the last tensor belong to none");
  return out;
}

void verify_safetensors_checksums(SafetensorsHeader& header, const uint8_t* data, const std::string& origin) {
  header.checksummed = verify_checksums(header.metadata, header.checksums, header.entries, data, origin);
  header.checksums.clear();
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const std::string& origin) {
  const uint64_t header_bytes = safetensors_header_length(data, size, size, origin);
  SafetensorsHeader out = parse_safetensors_header_json(data + 8, header_bytes, size, origin);
  verify_safetensors_checksums(out, data + out.data_start, origin);
  return out;
}

}  // namespace loom::nn
