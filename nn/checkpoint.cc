#include "nn/checkpoint.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "nn/safetensors.h"
#include "tensor/file_io.h"

namespace loom::nn {
namespace {

// Far beyond any model loom trains; a bound, so a wrong path cannot exhaust memory.
constexpr uint64_t kMaxCheckpointBytes = uint64_t{64} << 30;

// The tensors of a checked header, from its data section.
Checkpoint tensors_of(const SafetensorsHeader& header, const uint8_t* data) {
  Checkpoint out;
  out.metadata = header.metadata;
  out.checksummed = header.checksummed;
  for (const SafetensorsEntry& e : header.entries) {
    size_t bytes;
    DType loads_as;
    safetensors_dtype(e.dtype, &bytes, &loads_as);
    Tensor t = empty(Shape(e.shape), {.dtype = loads_as});
    decode_elements(e.dtype, data + e.begin, static_cast<size_t>(t.numel()), t.raw_data());
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

}  // namespace

Checkpoint parse_safetensors(const uint8_t* data, size_t size, const std::string& origin) {
  const SafetensorsHeader header = parse_safetensors_header(data, size, origin);
  return tensors_of(header, data + header.data_start);
}

// The length, then the header, then the data: a file that is no checkpoint
// (all zeros, a length past its end, a header that is not JSON) is refused
// before the rest of it is read.
Checkpoint load_safetensors(const std::string& path) {
  const FileReader file(path, "checkpoint", kMaxCheckpointBytes);
  const std::string start = file.read(0, std::min<uint64_t>(8, file.size()));
  const uint64_t header_bytes = safetensors_header_length(reinterpret_cast<const uint8_t*>(start.data()), start.size(),
                                                          file.size(), path);
  const std::string text = file.read(8, header_bytes);
  SafetensorsHeader header =
      parse_safetensors_header_json(reinterpret_cast<const uint8_t*>(text.data()), header_bytes, file.size(), path);
  const std::string data = file.read(header.data_start, file.size() - header.data_start);
  verify_safetensors_checksums(header, reinterpret_cast<const uint8_t*>(data.data()), path);
  return tensors_of(header, reinterpret_cast<const uint8_t*>(data.data()));
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::string> all_metadata = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [key, value] : metadata)
    LOOM_CHECK(key.rfind("loom.crc32:", 0) != 0, "save_safetensors: metadata key '", key, "' is reserved");
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    LOOM_CHECK(name != "__metadata__" && names.insert(name).second, "save_safetensors: tensor name '", name,
               "' is reserved or repeated");
    // A host tensor already laid out as the file wants it is written from
    // where it is: a synchronous save changes nothing meanwhile, and an
    // asynchronous one hands over its own copies (optim/async_checkpoint.h).
    Tensor h = t.detach().to(Device::cpu());
    if (!h.is_contiguous()) h = contiguous_copy(h);
    const uint64_t bytes = h.nbytes();
    const char* dtype = safetensors_dtype_name(h.dtype());
    header[name] = {{"dtype", dtype}, {"shape", h.shape().vec()}, {"data_offsets", {offset, offset + bytes}}};
    all_metadata.insert(tensor_checksum_entry(name, dtype, h.shape().vec(), h.raw_data(), bytes));
    offset += bytes;
    host.push_back(h);
  }
  all_metadata.insert(metadata_checksum_entry(all_metadata));
  header["__metadata__"] = all_metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad, so the data starts 8-byte aligned
  const uint64_t header_bytes = text.size();

  AtomicFile out(path);
  out.write(&header_bytes, 8);
  out.write(text);
  for (const Tensor& h : host) out.write(h.raw_data(), h.nbytes());
  out.commit();
}

}  // namespace loom::nn
