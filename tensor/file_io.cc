#include "tensor/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>

#include "tensor/error.h"
#include "tensor/fnv1a.h"

namespace loom {
namespace {

std::string reason() { return std::strerror(errno); }

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "host";
  return name;
}


// A temporary's name ends in "<pid>-<16 hex digits>": at most 10 + 1 + 16 characters.
constexpr size_t kUniqueTail = 27;

// "<target>.tmp-<host>-": the temporaries of writers of `path` on this machine.
// A temporary's name must stay within NAME_MAX (255 bytes on Linux file
// systems) wherever the target's does: a target name too long to carry the
// suffix is cut, and a hash of the whole name keeps the temporaries of two
// long names that share their start apart. The prefix depends only on the
// target and the host, so stale temporaries are still found.
std::string temporary_prefix(const std::string& path) {
  const std::string host = host_name().substr(0, 64);  // HOST_NAME_MAX
  const std::string tail = ".tmp-" + host + "-";
  const std::string base = base_of(path);
  if (base.size() + tail.size() + kUniqueTail <= NAME_MAX) return base + tail;
  char hash[18];
  std::snprintf(hash, sizeof(hash), "~%016llx", static_cast<unsigned long long>(fnv1a(base.data(), base.size())));
  const size_t keep = NAME_MAX - tail.size() - kUniqueTail - (sizeof(hash) - 1);
  return base.substr(0, keep) + hash + tail;
}

// Removes temporaries of `path` whose writer (a process on this machine) is gone.
void remove_stale_temporaries(const std::string& path) {
  const std::string folder = folder_of(path), prefix = temporary_prefix(path);
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return;  // creating the new temporary reports the problem
  while (const dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || *end != '-') continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) unlinkat(dirfd(dir), name.c_str(), 0);
  }
  closedir(dir);
}

// What sits at `path` must be replaceable by a file: nothing, a regular file
// or a link (which the rename replaces). Never a folder or a device node.
void check_replaceable(const std::string& path, const std::string& what) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;
  LOOM_CHECK(!S_ISDIR(st.st_mode), what, " ", path, ": is a folder; give a file name");
  LOOM_CHECK(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode), what, " ", path,
             ": is not a regular file (a device, pipe or socket); loom will not replace it");
}

void sync_folder(const std::string& folder) {
  const int fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  fsync(fd);  // makes the rename durable; a file system that cannot is no worse off
  close(fd);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  LOOM_CHECK(!path_.empty() && path_.back() != '/', "cannot write '", path_, "': give a file name");
  check_replaceable(path_, "output");
  remove_stale_temporaries(path_);
  std::random_device entropy;
  const uint64_t nonce = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(nonce));
  const size_t slash = path_.rfind('/');  // npos + 1 == 0: no folder part
  tmp_ = path_.substr(0, slash + 1) + temporary_prefix(path_) + std::to_string(getpid()) + "-" + suffix;
  // O_EXCL: a new file, never an existing one or a link's target.
  fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  LOOM_CHECK(fd_ >= 0, "cannot write ", path_, ": creating a file in ", folder_of(path_), " failed (", reason(), ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) close(fd_);
  if (!tmp_.empty()) unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  LOOM_CHECK(fd_ >= 0, "AtomicFile ", path_, ": write after commit");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd_, p, bytes);
    if (written < 0 && errno == EINTR) continue;
    LOOM_CHECK(written > 0, "cannot write ", path_, ": writing ", tmp_, " failed (",
               written < 0 ? reason() : "no progress", ")");
    p += written;
    bytes -= static_cast<size_t>(written);
  }
}

void AtomicFile::commit() {
  LOOM_CHECK(fd_ >= 0, "AtomicFile ", path_, ": committed twice");
  LOOM_CHECK(fsync(fd_) == 0, "cannot write ", path_, ": flushing ", tmp_, " to disk failed (", reason(), ")");
  const int closed = close(fd_);
  fd_ = -1;
  LOOM_CHECK(closed == 0, "cannot write ", path_, ": closing ", tmp_, " failed (", reason(), ")");
  check_replaceable(path_, "output");
  LOOM_CHECK(rename(tmp_.c_str(), path_.c_str()) == 0, "cannot write ", path_, ": renaming ", tmp_, " failed (",
             reason(), ")");
  tmp_.clear();
  sync_folder(folder_of(path_));
}

void AtomicFile::check_writable(const std::string& path, const std::string& what) {
  check_replaceable(path, what);
  try {
    AtomicFile probe(path);  // creates, then removes, a temporary beside it
  } catch (const Error& e) {
    LOOM_FAIL(what, ": ", e.what());
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile out(path);
  out.write(text);
  out.commit();
}

FileReader::FileReader(const std::string& path, const std::string& what, uint64_t max_bytes)
    : path_(path), what_(what) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  LOOM_CHECK(fd_ >= 0, what, " ", path, ": cannot open it (", reason(), ")");
  struct stat st;
  // Closed here on failure: a constructor that throws runs no destructor.
  const auto fail_unless = [&](bool ok, const std::string& message) {
    if (ok) return;
    close(fd_);
    LOOM_FAIL(what, " ", path, ": ", message);
  };
  fail_unless(fstat(fd_, &st) == 0, "cannot stat it (" + reason() + ")");
  fail_unless(!S_ISDIR(st.st_mode), "is a folder, not a file");
  fail_unless(S_ISREG(st.st_mode), "is not a regular file (a device, pipe or socket)");
  size_ = static_cast<uint64_t>(st.st_size);
  fail_unless(size_ <= max_bytes, "has " + std::to_string(size_) + " bytes, more than the " +
                                      std::to_string(max_bytes) + " a " + what + " may have");
}

FileReader::~FileReader() { close(fd_); }

std::string FileReader::read(uint64_t offset, uint64_t bytes) const {
  LOOM_INTERNAL_ASSERT(offset <= size_ && bytes <= size_ - offset, "FileReader ", path_, ": reading ", bytes,
                       " bytes at ", offset, " of ", size_);
  std::string out(bytes, '\0');
  size_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd_, out.data() + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    LOOM_CHECK(got >= 0, what_, " ", path_, ": reading failed (", reason(), ")");
    LOOM_CHECK(got > 0, what_, " ", path_, ": ended after ", offset + done, " of ", size_,
               " bytes (it changed while being read)");
    done += static_cast<size_t>(got);
  }
  return out;
}

std::string read_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const FileReader file(path, what, max_bytes);
  return file.read(0, file.size());
}

}  // namespace loom
