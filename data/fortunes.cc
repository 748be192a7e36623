#include "data/fortunes.h"

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <utility>

#include "tensor/error.h"
#include "tensor/file_io.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

bool is_fortune_file(const fs::directory_entry& entry) {
  std::error_code ec;
  if (entry.is_symlink(ec) || !entry.is_regular_file(ec)) return false;  // .u8 links, folders
  const std::string ext = entry.path().extension().string();
  return ext != ".dat" && ext != ".u8";
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

}  // namespace

std::vector<std::string> split_fortunes(const std::string& text) {
  std::vector<std::string> fortunes;
  std::string current;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;  // the line, with its '\n'
    const std::string line = text.substr(start, end - start);
    if (line == "%\n" || line == "%") {
      if (!blank(current)) fortunes.push_back(current);
      current.clear();
    } else {
      current += line;
    }
    start = end;
  }
  if (!blank(current)) fortunes.push_back(current);
  return fortunes;
}

std::string read_fortunes(const std::string& dir) {
  std::error_code ec;
  LOOM_CHECK(fs::is_directory(dir, ec), "read_fortunes: ", dir,
             " not found; install the Debian package fortunes (sudo apt-get install fortunes, or ",
             "run tools/setup.sh), or pass the folder of fortune files (the examples' --fortunes DIR)");
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    if (is_fortune_file(entry)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());  // directory order is the file system's whim

  // Sizes first: a huge (or sparse) file is refused by name before anything
  // is read, instead of filling memory and failing as if the batch were too big.
  uint64_t total = 0, largest = 0;
  fs::path largest_file;
  for (const fs::path& path : files) {
    const uint64_t size = fs::file_size(path, ec);
    LOOM_CHECK(!ec, "read_fortunes: cannot read the size of ", path.string(), " (", ec.message(), ")");
    total += size;
    if (size >= largest) std::tie(largest, largest_file) = std::pair(size, path);
  }
  LOOM_CHECK(total <= kMaxFortunesBytes, "read_fortunes: ", dir, " holds ", total, " bytes of text (the largest file, ",
             largest_file.string(), ", has ", largest, "), more than the ", kMaxFortunesBytes,
             " a character model's text may have (each character becomes an 8-byte token); pass a folder of text files");

  std::string corpus;
  for (const fs::path& path : files) {
    // read_file takes regular files only and bounds the size again, should a file grow meanwhile.
    const std::string text = read_file(path.string(), "read_fortunes: fortune file", kMaxFortunesBytes);
    for (std::string& fortune : split_fortunes(text)) {
      if (fortune.back() != '\n') fortune += '\n';  // the last one of a file may lack it
      corpus += fortune;
      corpus += '\n';
    }
  }
  LOOM_CHECK(!corpus.empty(), "read_fortunes: no fortunes in ", dir, " (", files.size(),
             " fortune files); install the Debian package fortunes, or pass a folder of fortune ",
             "files");
  return corpus;
}

}  // namespace loom::data
