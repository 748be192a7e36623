#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::data {
namespace {

class GzFile {
 public:
  explicit GzFile(const std::string& path) : file_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (file_) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return file_; }

 private:
  gzFile file_;
};

// zlib's messages start with the file's path, which our context already names.
std::string without_path(const std::string& message, const std::string& path) {
  const std::string prefix = path + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

// Appends up to `count` more decompressed bytes to `bytes`; fewer only at the
// end of the file. zlib reports a damaged or cut-off gzip stream either by
// returning -1 or by a short read with an error set, so both are checked.
void read_more(gzFile file, std::vector<uint8_t>& bytes, size_t count, const std::string& path,
               const std::string& context) {
  constexpr size_t kChunk = size_t{1} << 24;  // gzread takes an unsigned count
  while (count > 0) {
    const auto want = static_cast<unsigned>(std::min(count, kChunk));
    const size_t old = bytes.size();
    bytes.resize(old + want);
    const int got = gzread(file, bytes.data() + old, want);
    int status = Z_OK;
    const char* message = gzerror(file, &status);
    LOOM_CHECK(got >= 0 && (status == Z_OK || status == Z_STREAM_END), context,
               ": corrupt or truncated gzip data (zlib: ", without_path(message, path), ")");
    bytes.resize(old + static_cast<size_t>(got));
    if (static_cast<unsigned>(got) < want) return;  // end of file
    count -= want;
  }
}

// Opens `path` (gzip'd or raw) and reads its header into `bytes`.
IdxHeader open_and_read_header(const std::string& path, const std::string& context, GzFile& file,
                               std::vector<uint8_t>& bytes) {
  LOOM_CHECK(file.get() != nullptr, context, ": cannot open: ", std::strerror(errno));
  gzbuffer(file.get(), 1 << 20);
  // The magic's last byte is the rank, which says how many dims follow.
  read_more(file.get(), bytes, 4, path, context);
  if (bytes.size() == 4) read_more(file.get(), bytes, 4 * size_t{bytes[3]}, path, context);
  return parse_idx_header(bytes.data(), bytes.size(), context);
}

std::string checked_context(const std::string& path) {
  const std::string context = "read_idx: " + path;
  std::error_code ec;
  LOOM_CHECK(std::filesystem::exists(path, ec), context, ": no such file");
  LOOM_CHECK(std::filesystem::is_regular_file(path, ec), context, ": not a regular file");
  return context;
}

}  // namespace

Tensor idx_to_tensor(const IdxArray& array) {
  Tensor t = empty(Shape(array.header.dims), {.dtype = idx_loaded_dtype(array.header.type)});
  if (array.header.numel > 0) decode_idx(array, t.raw_data());
  return t;
}

IdxHeader read_idx_header(const std::string& path) {
  const std::string context = checked_context(path);
  GzFile file(path);
  std::vector<uint8_t> bytes;
  return open_and_read_header(path, context, file, bytes);
}

Tensor read_idx(const std::string& path, const IdxReadOptions& options) {
  const std::string context = checked_context(path);
  GzFile file(path);
  std::vector<uint8_t> bytes;
  const IdxHeader header = open_and_read_header(path, context, file, bytes);
  // The data is read into a buffer of the size the header promises, so the
  // promise is checked first.
  LOOM_CHECK(header.data_bytes <= options.max_data_bytes, context, ": the header declares ", header.data_bytes,
             " bytes of data (", idx_type_name(header.type), " of shape ", Shape(header.dims), "), more than the ",
             options.max_data_bytes, " read_idx takes (IdxReadOptions::max_data_bytes); nothing was decompressed");

  // One byte more than promised is enough to detect trailing bytes, and no
  // more is ever decompressed. A header that promises more than the file
  // holds costs no more memory than the file: the buffer grows only as data
  // arrives.
  constexpr size_t kMaxReserve = size_t{1} << 28;
  bytes.reserve(std::min(header.header_bytes + header.data_bytes + 1, kMaxReserve));
  read_more(file.get(), bytes, header.data_bytes + 1, path, context);
  return idx_to_tensor(parse_idx(bytes.data(), bytes.size(), context));
}

}  // namespace loom::data
