#include "examples/common/run_files.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "tensor/error.h"

namespace loom::examples {
namespace {

namespace fs = std::filesystem;

// Absolute, with "." and ".." gone and every link resolved as far as the path exists.
std::string resolved(const fs::path& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) return path.lexically_normal().string();
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return (ec ? absolute.lexically_normal() : canonical).string();
}

// What a write to `path` replaces: its folder resolved, its own name kept
// (AtomicFile renames over a link there instead of following it).
std::string entry_of(const std::string& path) {
  const fs::path p(path);
  const fs::path name = p.filename();
  if (name.empty() || name == "." || name == "..") return resolved(p);
  return (fs::path(resolved(p.parent_path().empty() ? fs::path(".") : p.parent_path())) / name).string();
}

bool inside(const std::string& file, const std::string& folder) {
  const std::string prefix = folder.back() == '/' ? folder : folder + "/";
  return file.compare(0, prefix.size(), prefix) == 0;
}

void add(std::vector<std::string>& files, const std::string& file) {
  if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
}

}  // namespace

void RunFiles::reads(const std::string& flag, const std::string& path) {
  Input in{flag, path, {}, ""};
  add(in.files, entry_of(path));
  add(in.files, resolved(path));
  inputs_.push_back(std::move(in));
}

void RunFiles::reads_folder(const std::string& flag, const std::string& path) {
  Input in{flag, path, {}, resolved(path)};
  add(in.files, entry_of(path));  // a link naming the folder is part of the input too
  // What the folder's entries link to lies elsewhere but is read all the same.
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_symlink(ec)) add(in.files, resolved(it->path()));
  inputs_.push_back(std::move(in));
}

void RunFiles::writes(const std::string& flag, const std::string& path) {
  outputs_.push_back({flag, path, entry_of(path)});
}

void RunFiles::check() const {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Output& out = outputs_[i];
    for (size_t j = 0; j < i; ++j) {
      const Output& other = outputs_[j];
      LOOM_CHECK(other.file != out.file || other.flag == out.flag, out.flag, " ", out.path, " and ", other.flag, " ",
                 other.path, " are one file (", out.file, "): each write would replace the other; give each its ",
                 "own name");
    }
    for (const Input& in : inputs_) {
      if (in.flag == out.flag) continue;  // --checkpoint: read on --resume, then rewritten
      const bool replaces = std::find(in.files.begin(), in.files.end(), out.file) != in.files.end();
      LOOM_CHECK(!replaces, out.flag, " ", out.path, " would replace ", in.flag, " ", in.path, ", which this run ",
                 "reads (", out.file, "); give the output another name");
      LOOM_CHECK(in.folder.empty() || !inside(out.file, in.folder), out.flag, " ", out.path, " is inside the folder ",
                 in.flag, " ", in.path, " (", in.folder, "), which this run reads; write outputs elsewhere");
    }
  }
}

}  // namespace loom::examples
