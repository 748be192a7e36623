// How loom reads and writes whole files: every file it writes (checkpoints,
// metrics, traces, benchmark records) goes through AtomicFile, and every file
// it reads (checkpoints) through read_file or, piece by piece, FileReader.
//
//   AtomicFile out("run/metrics.csv");   // a new temporary next to the target
//   out.write(text.data(), text.size());
//   out.commit();                        // fsync, rename over the target, fsync the folder
//   // destroyed without commit(): the temporary is removed, the target untouched
//
//   std::string bytes = read_file("run.safetensors", "checkpoint", 1 << 30);
//   FileReader file("run.safetensors", "checkpoint", 1 << 30);   // the same checks, nothing read yet
//   std::string length = file.read(0, 8);
//
// The temporary is created exclusively under a random name and never through
// a symbolic link, so a link planted at a predictable name cannot redirect
// the write; the rename replaces a link at the target itself rather than
// writing where it points. The temporary's name fits wherever the target's
// does: a name too long to carry the suffix is cut and hashed. Temporaries left by a killed writer (on this
// machine, whose process is gone) are removed by the next write to the same
// target. Errors throw loom::Error naming the file and the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // without commit(): removes the temporary
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  // Makes the file durable and puts it in place; nothing is written after.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

  // Fails now, with the reason, where a write to `path` would fail later (its
  // folder is missing or read-only, or the path names a folder), so programs
  // can check their outputs before hours of work. `what` names the file's role.
  static void check_writable(const std::string& path, const std::string& what);

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// Writes `text` to `path` atomically.
void write_file_atomically(const std::string& path, const std::string& text);

// The whole of a regular file, refusing anything else (a folder, a device
// such as /dev/zero, a pipe) and files over `max_bytes`. `what` names the
// file's role in errors ("checkpoint").
std::string read_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// A file opened as read_file opens it, read in pieces: a reader can check a
// header before it reads (and allocates for) the rest, so that a file that is
// not what it should be costs a few bytes, not its whole size.
class FileReader {
 public:
  FileReader(const std::string& path, const std::string& what, uint64_t max_bytes);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  uint64_t size() const { return size_; }
  // `bytes` bytes from `offset`; the range must lie inside the file.
  std::string read(uint64_t offset, uint64_t bytes) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace loom
