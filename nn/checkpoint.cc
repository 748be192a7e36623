#include "nn/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace loom::nn {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // the format's own limit

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case kBool: return "BOOL";
    case kUInt8: return "U8";
    case kInt64: return "I64";
    case kFloat32: return "F32";
    case kFloat64: return "F64";
  }
  return "?";
}

// A dtype of the file: its size, and the loom dtype it loads as.
struct FileDType {
  size_t bytes;
  DType loads_as;
};

bool file_dtype(const std::string& name, FileDType* out) {
  static const std::map<std::string, FileDType> known = {
      {"BOOL", {1, kBool}}, {"U8", {1, kUInt8}},     {"I32", {4, kInt64}},   {"I64", {8, kInt64}},
      {"F16", {2, kFloat32}}, {"BF16", {2, kFloat32}}, {"F32", {4, kFloat32}}, {"F64", {8, kFloat64}}};
  auto it = known.find(name);
  if (it == known.end()) return false;
  *out = it->second;
  return true;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // zero
  } else {        // subnormal half: normalise it
    int shift = 0;
    uint32_t m = mantissa;
    while (!(m & 0x400u)) {
      m <<= 1;
      ++shift;
    }
    bits = sign | ((113 - shift) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bfloat16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Decodes `count` elements of `dtype` at `src` into a new CPU tensor.
Tensor decode(const uint8_t* src, const std::string& dtype, const FileDType& info, const Shape& shape) {
  Tensor t = empty(shape, {.dtype = info.loads_as});
  const int64_t n = t.numel();
  if (dtype == "F16" || dtype == "BF16") {
    float* out = t.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      out[i] = dtype == "F16" ? half_to_float(v) : bfloat16_to_float(v);
    }
  } else if (dtype == "I32") {
    int64_t* out = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      out[i] = v;
    }
  } else if (n > 0) {
    std::memcpy(t.raw_data(), src, n * info.bytes);
  }
  return t;
}

// The header's JSON, rejecting duplicate top-level names (which the format forbids).
json parse_header(const uint8_t* data, size_t size, const std::string& origin) {
  std::set<std::string> names;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
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

[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  LOOM_FAIL("checkpoint ", path, ": ", what, " failed: ", std::strerror(errno));
}

}  // namespace

Checkpoint parse_safetensors(const uint8_t* data, size_t size, const std::string& origin) {
  LOOM_CHECK(size >= 8, "checkpoint ", origin, ": the file has ", size,
             " bytes, too short for a safetensors header length (8 bytes); is it a safetensors file?");
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, data, 8);
  LOOM_CHECK(header_bytes <= kMaxHeaderBytes && header_bytes <= size - 8, "checkpoint ", origin,
             ": the header claims ", header_bytes, " bytes but the file has ", size - 8,
             " after the length (truncated, or not a safetensors file)");
  json header = parse_header(data + 8, header_bytes, origin);
  const uint8_t* buffer = data + 8 + header_bytes;
  const uint64_t buffer_bytes = size - 8 - header_bytes;

  Checkpoint out;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      LOOM_CHECK(entry.is_object(), "checkpoint ", origin, ": __metadata__ must be an object of strings");
      for (auto& [key, value] : entry.items()) {
        LOOM_CHECK(value.is_string(), "checkpoint ", origin, ": metadata '", key, "' must be a string, got ",
                   value.dump());
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    LOOM_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
               "checkpoint ", origin, ": ", where, " needs dtype, shape and data_offsets");
    LOOM_CHECK(entry["dtype"].is_string(), "checkpoint ", origin, ": ", where, " has a non-string dtype");
    const std::string dtype = entry["dtype"].get<std::string>();
    FileDType info;
    LOOM_CHECK(file_dtype(dtype, &info), "checkpoint ", origin, ": ", where, " has unsupported dtype ", dtype);
    LOOM_CHECK(entry["shape"].is_array() && entry["shape"].size() <= kMaxDims, "checkpoint ", origin, ": ", where,
               " needs a shape of at most ", kMaxDims, " sizes, got ", entry["shape"].dump());
    Shape shape;
    uint64_t bytes = info.bytes;
    for (const json& s : entry["shape"]) {
      uint64_t dim = as_size(s, origin, where + " shape size");
      shape.push_back(static_cast<int64_t>(std::min<uint64_t>(dim, INT64_MAX)));
      LOOM_CHECK(!__builtin_mul_overflow(bytes, dim, &bytes), "checkpoint ", origin, ": ", where, " shape ",
                 entry["shape"].dump(), " is too large");
    }
    const json& offsets = entry["data_offsets"];
    LOOM_CHECK(offsets.is_array() && offsets.size() == 2, "checkpoint ", origin, ": ", where,
               " data_offsets must be [begin, end], got ", offsets.dump());
    const uint64_t begin = as_size(offsets[0], origin, where + " offset"), end = as_size(offsets[1], origin, where + " offset");
    LOOM_CHECK(begin <= end && end <= buffer_bytes, "checkpoint ", origin, ": ", where, " data_offsets [", begin, ", ",
               end, "] lie outside the ", buffer_bytes, " data bytes (truncated file?)");
    LOOM_CHECK(end - begin == bytes, "checkpoint ", origin, ": ", where, " has ", end - begin, " bytes but ", dtype,
               " shape ", entry["shape"].dump(), " needs ", bytes);
    spans.push_back({begin, end, name});
    out.tensors.emplace_back(name, decode(buffer + begin, dtype, info, shape));
  }
  // The format requires the tensors to tile the data exactly: no gaps, no overlaps.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Span& s : spans) {
    LOOM_CHECK(s.begin == expected, "checkpoint ", origin, ": tensor '", s.name, "' starts at byte ", s.begin,
               ", expected ", expected, " (tensors overlap or leave a gap)");
    expected = s.end;
  }
  LOOM_CHECK(expected == buffer_bytes, "checkpoint ", origin, ": ", buffer_bytes - expected,
             " bytes after the last tensor belong to none");
  // File order, as written.
  std::map<std::string, uint64_t> position;
  for (const Span& s : spans) position[s.name] = s.begin;
  std::sort(out.tensors.begin(), out.tensors.end(),
            [&](const auto& a, const auto& b) { return position[a.first] < position[b.first]; });
  return out;
}

Checkpoint load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "checkpoint ", path, ": cannot open it (", std::strerror(errno), ")");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOOM_CHECK(!in.bad(), "checkpoint ", path, ": reading failed");
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::vector<Tensor> host;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    LOOM_CHECK(name != "__metadata__" && names.insert(name).second, "save_safetensors: tensor name '", name,
               "' is reserved or repeated");
    Tensor h = contiguous_copy(t.detach().to(Device::cpu()));
    const uint64_t bytes = static_cast<uint64_t>(h.numel()) * h.element_size();
    header[name] = {{"dtype", safetensors_dtype(h.dtype())}, {"shape", h.shape().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(h);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad, so the data starts 8-byte aligned
  const uint64_t header_bytes = text.size();

  // Write under a temporary name next to the target, then rename over it.
  std::random_device entropy;
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(entropy());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) fail_io("creating " + tmp, path);
  auto write_all = [&](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd, c, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  };
  bool ok = write_all(&header_bytes, 8) && write_all(text.data(), text.size());
  for (size_t i = 0; ok && i < host.size(); ++i)
    ok = write_all(host[i].raw_data(), static_cast<size_t>(host[i].numel()) * host[i].element_size());
  ok = ok && ::fsync(fd) == 0;
  int saved_errno = errno;
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    saved_errno = errno;
  }
  if (!ok) {  // the target is untouched; drop the partial temporary
    ::unlink(tmp.c_str());
    errno = saved_errno;
    fail_io("writing (via " + tmp + ")", path);
  }
  // Make the rename itself durable.
  const std::string folder = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/') + 1);
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace loom::nn
