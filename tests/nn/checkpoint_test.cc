// safetensors checkpoints: the format byte by byte, round trips, every way a
// file can be corrupt, and atomic replacement.
#include "nn/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/nn.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;
using testing::values;
namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("ckpt_" + std::to_string(getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read_file(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static void write_file(const std::string& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary).write(bytes.data(), bytes.size());
  }
  // A file from its JSON header text and data bytes, laid out as the format says.
  static std::string make_file(const std::string& header, const std::string& data) {
    uint64_t n = header.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    return out + header + data;
  }
  static std::string floats(std::vector<float> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, ReadsAFileWrittenFromTheSpecification) {
  // Two tensors, a padded header, metadata, and half-precision data.
  std::string data = floats({1.5f, -2.0f, 3.25f, 0.0f, 4.0f, 5.0f});
  int64_t ids[2] = {7, -9};
  data += std::string(reinterpret_cast<const char*>(ids), 16);
  uint16_t halves[2] = {0x3C00 /* 1.0 */, 0xC100 /* -2.5 */};
  data += std::string(reinterpret_cast<const char*>(halves), 4);
  uint16_t bf[1] = {0x4049 /* 3.140625 */};
  data += std::string(reinterpret_cast<const char*>(bf), 2);
  std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                       R"("ids":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},)"
                       R"("h":{"dtype":"F16","shape":[2],"data_offsets":[40,44]},)"
                       R"("b":{"dtype":"BF16","shape":[],"data_offsets":[44,46]},)"
                       R"("__metadata__":{"format":"pt"}}   )";
  write_file(path("spec.safetensors"), make_file(header, data));
  nn::Checkpoint c = nn::load_safetensors(path("spec.safetensors"));
  ASSERT_EQ(c.tensors.size(), 4u);
  EXPECT_EQ(c.tensors[0].first, "w");
  EXPECT_EQ(c.tensors[0].second.shape(), (Shape{2, 3}));
  expect_values(c.tensors[0].second, {1.5, -2.0, 3.25, 0.0, 4.0, 5.0});
  EXPECT_EQ(c.tensors[1].second.dtype(), kInt64);
  expect_values(c.tensors[1].second, {7, -9});
  EXPECT_EQ(c.tensors[2].second.dtype(), kFloat16);  // as in the file, not upcast
  expect_values(c.tensors[2].second, {1.0, -2.5});
  EXPECT_EQ(c.tensors[3].second.dtype(), kBFloat16);
  EXPECT_EQ(c.tensors[3].second.shape(), (Shape{}));
  expect_values(c.tensors[3].second, {3.140625});
  EXPECT_EQ(c.metadata.at("format"), "pt");
  EXPECT_FALSE(c.checksummed);  // a file without loom's checksums (PyTorch's) loads unchecked
}

TEST_F(CheckpointTest, WritesTheSpecificationsLayout) {
  nn::save_safetensors(path("out.safetensors"),
                       {{"a", from_vector<float>({1, 2, 3}, {3})}, {"b", from_vector<int64_t>({4, 5}, {1, 2})}},
                       {{"epoch", "3"}});
  std::string bytes = read_file(path("out.safetensors"));
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);  // padded, so the data is aligned
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["a"]["shape"], nlohmann::json::array({3}));
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(header["b"]["dtype"], "I64");
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({12, 28}));
  EXPECT_EQ(header["__metadata__"]["epoch"], "3");
  EXPECT_EQ(bytes.size(), 8 + n + 28);
  float a[3];
  std::memcpy(a, bytes.data() + 8 + n, 12);
  EXPECT_EQ(a[2], 3.0f);
}

// 16-bit tensors are written as BF16 and F16 and come back bit for bit, as
// the same dtype; a model loading them converts to its own dtype, as
// PyTorch's load_state_dict does.
TEST_F(CheckpointTest, SixteenBitTensorsRoundTripAndConvertOnLoad) {
  Tensor w = from_vector<float>({0.1f, -3.5f, 1e-5f, 65504.0f, 7.0f, -0.0f}, {2, 3});
  Tensor b = from_vector<float>({0.3f, 70000.0f}, {2});
  const Tensor w16 = w.to(kBFloat16), b16 = b.to(kFloat16);  // 70000 is past float16's range: inf
  nn::save_safetensors(path("half.safetensors"), {{"weight", w16}, {"bias", b16}});
  const std::string bytes = read_file(path("half.safetensors"));
  EXPECT_NE(bytes.find(R"("dtype":"BF16")"), std::string::npos);
  EXPECT_NE(bytes.find(R"("dtype":"F16")"), std::string::npos);
  nn::Checkpoint c = nn::load_safetensors(path("half.safetensors"));
  ASSERT_EQ(c.tensors.size(), 2u);
  for (const auto& [name, t] : c.tensors) {
    const Tensor& original = name == "weight" ? w16 : b16;
    EXPECT_EQ(t.dtype(), original.dtype()) << name;
    EXPECT_EQ(std::memcmp(t.raw_data(), original.raw_data(), t.nbytes()), 0) << name;
  }
  nn::Linear fc(3, 2);
  fc->load_state_dict(c.tensors);
  EXPECT_EQ(fc->weight.dtype(), kFloat32);
  expect_values(fc->weight, values(w16.to(kFloat32)));
  EXPECT_EQ(values(fc->bias)[0], static_cast<double>(half_bits_to_float(float_to_half_bits(0.3f))));
  EXPECT_EQ(values(fc->bias)[1], INFINITY);
}

TEST_F(CheckpointTest, ModelRoundTripGivesIdenticalOutputs) {
  manual_seed(1);
  nn::Sequential net(nn::Conv2d({.in_channels = 1, .out_channels = 4, .kernel_size = 3}), nn::BatchNorm2d(4),
                     nn::ReLU(), nn::Flatten(), nn::Linear(4 * 6 * 6, 3));
  net->forward(randn({2, 1, 8, 8}));  // moves the BatchNorm running statistics off their defaults
  net->eval();
  nn::save_safetensors(path("net.safetensors"), net->state_dict());
  manual_seed(2);
  nn::Sequential fresh(nn::Conv2d({.in_channels = 1, .out_channels = 4, .kernel_size = 3}), nn::BatchNorm2d(4),
                       nn::ReLU(), nn::Flatten(), nn::Linear(4 * 6 * 6, 3));
  fresh->eval();
  Tensor x = randn({5, 1, 8, 8});
  EXPECT_GT(testing::max_rel_error(fresh->forward(x), net->forward(x)), 1e-3);
  fresh->load_state_dict(nn::load_safetensors(path("net.safetensors")).tensors);
  EXPECT_EQ(values(fresh->forward(x)), values(net->forward(x)));  // bit for bit
}

TEST_F(CheckpointTest, CorruptFilesAreClearErrors) {
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string good = make_file(good_header, floats({1, 2}));
  struct Case {
    std::string name, bytes, message;
  };
  std::vector<Case> cases = {
      {"empty", "", "too short for a safetensors header length"},
      {"short", "abc", "too short"},
      {"text", "this is not a checkpoint at all, just text", "the header claims"},
      {"truncated_header", good.substr(0, 20), "the header claims"},
      {"truncated_data", good.substr(0, good.size() - 3), "lie outside the 5 data bytes"},
      {"trailing_bytes", good + "xyz", "3 bytes after the last tensor belong to none"},
      {"not_json", make_file("{not json", ""), "the header is not valid JSON"},
      {"not_object", make_file("[1, 2]", ""), "the header must be a JSON object, got array"},
      {"unknown_dtype", make_file(R"({"w":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", floats({1, 2})),
       "tensor 'w' has unsupported dtype C64"},
      {"missing_field", make_file(R"({"w":{"dtype":"F32","shape":[2]}})", floats({1, 2})),
       "tensor 'w' needs dtype, shape and data_offsets"},
      {"negative_size", make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2})),
       "shape size must be a non-negative integer, got -2"},
      {"size_mismatch", make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2})),
       "tensor 'w' has 8 bytes but F32 shape [3] needs 12"},
      {"offsets_reversed", make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", floats({1, 2})),
       "data_offsets [8, 0] lie outside"},
      {"huge_shape", make_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                               floats({1, 2})),
       "is too large"},
      {"overlap", make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            floats({1, 2})),
       "tensors overlap or leave a gap"},
      {"duplicate", make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              floats({1, 2})),
       "tensor 'w' appears twice in the header"},
      {"bad_metadata", make_file(R"({"__metadata__":{"k":1}})", ""), "metadata 'k' must be a string"},
      {"deep", make_file(R"({"w":)" + std::string(1000, '['), ""),
       "the header nests JSON more than 8 levels deep; a safetensors header has 3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write_file(path(c.name), c.bytes);
    EXPECT_THROW_MSG(nn::load_safetensors(path(c.name)), c.message);
    EXPECT_THROW_MSG(nn::load_safetensors(path(c.name)), path(c.name));  // says which file
  }
  EXPECT_THROW_MSG(nn::load_safetensors(path("missing")), "cannot open it");
}

// The header of a file as JSON, and a file rebuilt from an edited header and its data.
nlohmann::json header_of(const std::string& file) {
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  return nlohmann::json::parse(file.substr(8, n));
}
std::string data_of(const std::string& file) {
  uint64_t n;
  std::memcpy(&n, file.data(), 8);
  return file.substr(8 + n);
}

TEST_F(CheckpointTest, ChecksumsCatchDamageAndTampering) {
  nn::save_safetensors(path("good"), {{"a", from_vector<float>({1, 2, 3}, {3})}, {"b", from_vector<float>({4}, {1})}},
                       {{"epoch", "3"}});
  nn::Checkpoint good = nn::load_safetensors(path("good"));
  EXPECT_TRUE(good.checksummed);
  EXPECT_EQ(good.metadata, (std::map<std::string, std::string>{{"epoch", "3"}}));  // checksums are not the user's
  const std::string bytes = read_file(path("good"));
  const nlohmann::json header = header_of(bytes);
  EXPECT_EQ(header["__metadata__"].size(), 4u);  // epoch, one per tensor, and the metadata's own

  std::string flipped = bytes;
  flipped[flipped.size() - 3] ^= 0x10;  // one bit of b's float
  write_file(path("flipped"), flipped);
  EXPECT_THROW_MSG(nn::load_safetensors(path("flipped")), "tensor 'b' does not match its checksum");

  // F32 relabelled as I32: the same size, so only the checksum can tell.
  nlohmann::json relabelled = header;
  relabelled["a"]["dtype"] = "I32";
  write_file(path("relabelled"), make_file(relabelled.dump(), data_of(bytes)));
  EXPECT_THROW_MSG(nn::load_safetensors(path("relabelled")), "tensor 'a' does not match its checksum");

  nlohmann::json edited = header;
  edited["__metadata__"]["epoch"] = "7";
  write_file(path("edited"), make_file(edited.dump(), data_of(bytes)));
  EXPECT_THROW_MSG(nn::load_safetensors(path("edited")), "the metadata does not match its checksum");

  nlohmann::json dropped = header;  // b and its bytes removed, the metadata kept
  dropped.erase("b");
  write_file(path("dropped"), make_file(dropped.dump(), data_of(bytes).substr(0, 12)));
  EXPECT_THROW_MSG(nn::load_safetensors(path("dropped")), "tensor 'b' has a checksum but is missing");

  EXPECT_THROW_MSG(nn::save_safetensors(path("x"), {}, {{"loom.crc32:a", "0"}}), "is reserved");
}

// Bytes this process has read through read() and pread() so far (Linux's
// /proc/self/io), or -1 where the kernel does not count them.
int64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

// The 8-byte length is checked against the file before anything else is read:
// a file of zeros, or one whose length field is huge, fails at once, whatever
// its size, with a message that says what the length was.
TEST_F(CheckpointTest, HeaderLengthIsCheckedBeforeTheRestIsRead) {
  const uint64_t big = uint64_t{1} << 30;  // sparse: 1 GiB of zeros that take no disk
  {
    std::ofstream(path("zeros"), std::ios::binary);
    fs::resize_file(path("zeros"), big);
  }
  std::string huge(8, '\0');
  const uint64_t claim = uint64_t{1} << 62;
  std::memcpy(huge.data(), &claim, 8);
  write_file(path("huge"), huge + "{}");
  std::string over_limit(8, '\0');
  const uint64_t over = (uint64_t{100} << 20) + 1;  // one past the format's 100 MiB
  std::memcpy(over_limit.data(), &over, 8);
  write_file(path("over_limit"), over_limit + "{}");
  {
    std::ofstream(path("over_limit_sparse"), std::ios::binary).write(over_limit.data(), 8);
    fs::resize_file(path("over_limit_sparse"), big);
  }

  const int64_t before = bytes_read_so_far();
  EXPECT_THROW_MSG(nn::load_safetensors(path("zeros")),
                   "checkpoint " + path("zeros") + ": the header claims 0 bytes (the file's first 8), too few for a "
                   "JSON object; is it a safetensors file?");
  EXPECT_THROW_MSG(nn::load_safetensors(path("over_limit_sparse")),
                   "the header claims 104857601 bytes, more than the format's limit of 104857600");
  if (before >= 0) {
    EXPECT_LT(bytes_read_so_far() - before, 1 << 20) << "read far more than the length";
  }
  EXPECT_THROW_MSG(nn::load_safetensors(path("huge")),
                   "the header claims 4611686018427387904 bytes, more than the format's limit");
  EXPECT_THROW_MSG(nn::load_safetensors(path("over_limit")), "more than the format's limit of 104857600");
  // A plausible length past the end of the file.
  write_file(path("short"), make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "").substr(0, 30));
  EXPECT_THROW_MSG(nn::load_safetensors(path("short")),
                   "the header claims 54 bytes but the file has 22 after the length (truncated");
  // The same checks for a file already in memory.
  const std::string zeros(64, '\0');
  EXPECT_THROW_MSG(nn::parse_safetensors(reinterpret_cast<const uint8_t*>(zeros.data()), zeros.size(), "buffer"),
                   "checkpoint buffer: the header claims 0 bytes");
}

// A header that is not JSON is refused before the data after it is read.
TEST_F(CheckpointTest, HeaderIsCheckedBeforeTheDataIsRead) {
  const std::string header = "{not json at all}";
  write_file(path("bad_header"), make_file(header, ""));
  fs::resize_file(path("bad_header"), uint64_t{1} << 30);  // 1 GiB of data after it, sparse
  const int64_t before = bytes_read_so_far();
  EXPECT_THROW_MSG(nn::load_safetensors(path("bad_header")), "the header is not valid JSON");
  if (before >= 0) {
    EXPECT_LT(bytes_read_so_far() - before, 1 << 20) << "read the data before checking the header";
  }
}

// A header of the format's largest size (100 MiB) that only opens arrays
// costs the parser memory for every level: refused at the ninth, it fails in
// about the memory of the file rather than gigabytes (which ended in a
// std::bad_alloc, reported as "try a smaller --batch-size").
TEST_F(CheckpointTest, DeeplyNestedHeaderIsRefusedEarly) {
  const uint64_t size = (uint64_t{100} << 20) - 8;
  write_file(path("deep"), make_file(R"({"w":)" + std::string(size - 5, '['), ""));
  struct rusage before {}, after {};
  getrusage(RUSAGE_SELF, &before);
  EXPECT_THROW_MSG(nn::load_safetensors(path("deep")), "checkpoint " + path("deep") +
                                                           ": the header nests JSON more than 8 levels deep");
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 512 << 10) << "KiB more at the peak";  // ru_maxrss is in KiB
}

TEST_F(CheckpointTest, ReadsOnlyRegularFiles) {
  EXPECT_THROW_MSG(nn::load_safetensors("/dev/zero"), "checkpoint /dev/zero: is not a regular file");
  EXPECT_THROW_MSG(nn::load_safetensors(dir_.string()), "is a folder");
}

TEST_F(CheckpointTest, FailedWriteLeavesNoFileBehind) {
  EXPECT_THROW_MSG(nn::save_safetensors(path("no/such/dir/x.safetensors"), {{"a", ones({2})}}), "No such file");
  EXPECT_THROW_MSG(nn::save_safetensors(path("x"), {{"a", ones({2})}, {"a", ones({1})}}),
                   "tensor name 'a' is reserved or repeated");
  EXPECT_TRUE(fs::is_empty(dir_));
}

// A writer killed in the middle of saving never leaves a partial file under
// the real name: the old checkpoint (or a complete new one) is always there.
TEST_F(CheckpointTest, KilledWriterLeavesTheOldFileIntact) {
  const std::string target = path("model.safetensors");
  nn::save_safetensors(target, {{"old", full({4}, 1.0)}});
  Tensor big = ones({16 << 20});  // 64 MiB: saving takes a while
  for (int attempt = 0; attempt < 3; ++attempt) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (;;) nn::save_safetensors(target, {{"new", big}});
    }
    // Wait until the child is writing a temporary file, then kill it.
    for (int i = 0; i < 2000; ++i) {
      bool writing = false;
      for (auto& entry : fs::directory_iterator(dir_))
        writing |= entry.path().filename().string().find(".tmp-") != std::string::npos;
      if (writing) break;
      usleep(1000);
    }
    usleep(attempt * 20000);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    nn::Checkpoint c = nn::load_safetensors(target);  // must parse: old or complete new
    ASSERT_EQ(c.tensors.size(), 1u);
    EXPECT_TRUE(c.tensors[0].first == "old" || c.tensors[0].first == "new");
    if (c.tensors[0].first == "new") {
      EXPECT_EQ(c.tensors[0].second.numel(), big.numel());
    }
  }
}

}  // namespace
}  // namespace loom
