// libFuzzer target for the whole resume path of the training examples: the
// bytes of a checkpoint file go through RunRecord::resume (read_file, the
// safetensors parser, checksums, metadata, settings, metrics rows) into a
// real model and optimizer. Every input must either resume or raise
// loom::Error; anything else escaping (another exception, a crash, a read out
// of bounds under AddressSanitizer) is a bug.
//
// Built with libFuzzer by `tools/fuzz.sh resume`; tests/examples:resume_fuzz_test
// runs it over a corpus as a regular test.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <cstring>
#include <nlohmann/json.hpp>

#include "examples/common/fuzz/resume_target.h"
#include "nn/safetensors.h"
#include "tensor/error.h"

namespace loom::examples::fuzz {

std::optional<std::string> resealed(const std::string& file) {
  using json = nlohmann::json;
  if (file.size() < 8) return std::nullopt;
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  if (n > file.size() - 8) return std::nullopt;
  json header = json::parse(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr, false);
  if (!header.is_object()) return std::nullopt;
  const std::string body = file.substr(8 + n);
  std::map<std::string, std::string> metadata;
  if (header.contains("__metadata__") && header["__metadata__"].is_object())
    for (const auto& [key, value] : header["__metadata__"].items())
      if (value.is_string() && key.rfind("loom.crc32:", 0) != 0) metadata[key] = value.get<std::string>();
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__" || !entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets"))
      continue;
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      continue;
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    std::vector<int64_t> shape;
    bool ok = begin <= end && end <= body.size();
    for (const json& d : entry["shape"]) {
      ok = ok && d.is_number_integer();
      if (ok) shape.push_back(d.get<int64_t>());
    }
    if (ok)
      metadata.insert(nn::tensor_checksum_entry(name, entry["dtype"].get<std::string>(), shape, body.data() + begin,
                                                end - begin));
  }
  metadata.insert(nn::metadata_checksum_entry(metadata));
  header["__metadata__"] = metadata;
  const std::string text = header.dump();
  const uint64_t length = text.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + text + body;
}

namespace {

void resume(const uint8_t* data, size_t size) {
  static ResumeTarget target;
  static const std::string path = [] {
    const char* dir = std::getenv("TEST_TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/resume_fuzz_" + std::to_string(getpid()) + ".safetensors";
  }();
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  RunRecord record(ResumeTarget::options(path));
  try {
    record.resume(*target.model, target.optimizer);
  } catch (const Error&) {
  }
}

}  // namespace
}  // namespace loom::examples::fuzz

// Each input twice: as it is (the checksums must catch the mutation), and
// resealed (the checks behind them must).
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::examples::fuzz;
  resume(data, size);
  const std::string file(reinterpret_cast<const char*>(data), size);
  if (std::optional<std::string> sealed = resealed(file); sealed && *sealed != file)
    resume(reinterpret_cast<const uint8_t*>(sealed->data()), sealed->size());
  return 0;
}
