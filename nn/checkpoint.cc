#include "nn/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "nn/safetensors.h"

namespace loom::nn {
namespace {

[[noreturn]] void fail_io(const std::string& what, const std::string& path) {
  LOOM_FAIL("checkpoint ", path, ": ", what, " failed: ", std::strerror(errno));
}

}  // namespace

Checkpoint parse_safetensors(const uint8_t* data, size_t size, const std::string& origin) {
  SafetensorsHeader header = parse_safetensors_header(data, size, origin);
  Checkpoint out;
  out.metadata = header.metadata;
  for (const SafetensorsEntry& e : header.entries) {
    size_t bytes;
    DType loads_as;
    safetensors_dtype(e.dtype, &bytes, &loads_as);
    Tensor t = empty(Shape(e.shape), {.dtype = loads_as});
    decode_elements(e.dtype, data + header.data_start + e.begin, static_cast<size_t>(t.numel()), t.raw_data());
    out.tensors.emplace_back(e.name, t);
  }
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
  nlohmann::json header = nlohmann::json::object();
  std::vector<Tensor> host;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    LOOM_CHECK(name != "__metadata__" && names.insert(name).second, "save_safetensors: tensor name '", name,
               "' is reserved or repeated");
    Tensor h = contiguous_copy(t.detach().to(Device::cpu()));
    const uint64_t bytes = static_cast<uint64_t>(h.numel()) * h.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(h.dtype())}, {"shape", h.shape().vec()},
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
