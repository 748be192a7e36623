// The files a run reads and writes, checked against each other before any
// work: an output that is also an input, or two outputs that are one file,
// would overwrite one with the other (`--metrics` equal to `--checkpoint`
// left a CSV where the checkpoint was; a `--metrics` inside `--data` replaced
// a data file).
//
//   RunFiles files;
//   files.reads_folder("--data", config.data_root);
//   if (config.resume) files.reads("--checkpoint", config.checkpoint);
//   files.writes("--checkpoint", config.checkpoint);
//   files.writes("--metrics", config.metrics);
//   files.check();  // loom::Error naming both flags, both paths and the file they share
//
// Paths compare as the file system resolves them: relative spellings, "."
// and "..", and links in their folders all resolve to one canonical path. An
// output's own name is not followed: AtomicFile replaces a link there rather
// than writing where it points, so a link named as an output overwrites only
// itself. An input counts both as named and as resolved (a link and its
// target are both its file), and a folder input also claims everything in it,
// and what each of its entries links to. A flag may read and write the same
// file: --resume reads the checkpoint that the run then rewrites.
#pragma once

#include <string>
#include <vector>

namespace loom::examples {

class RunFiles {
 public:
  void reads(const std::string& flag, const std::string& path);
  // A folder the run reads: nothing may be written inside it.
  void reads_folder(const std::string& flag, const std::string& path);
  void writes(const std::string& flag, const std::string& path);

  // Throws loom::Error for the first output that is another output, an input,
  // or inside an input folder.
  void check() const;

 private:
  struct Input {
    std::string flag, path;
    std::vector<std::string> files;  // canonical paths this input reads
    std::string folder;              // canonical; empty for a file
  };
  struct Output {
    std::string flag, path, file;  // file: canonical folder + its own name
  };
  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
};

}  // namespace loom::examples
