#include "tensorboard/summary_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tensor/error.h"
#include "tensorboard/event.h"

namespace loom::tensorboard {
namespace {

std::string reason() { return std::strerror(errno); }

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// mkdir -p, naming the folder that could not be made and why.
void make_folders(const std::string& log_dir) {
  LOOM_CHECK(!log_dir.empty(), "SummaryWriter: the log folder is empty: name a folder, e.g. runs/exp1");
  for (size_t end = 1; end <= log_dir.size(); ++end) {
    if (end < log_dir.size() && log_dir[end] != '/') continue;
    const std::string prefix = log_dir.substr(0, end);
    if (mkdir(prefix.c_str(), 0777) == 0 || errno == EEXIST) continue;
    LOOM_FAIL("SummaryWriter: cannot create the log folder '", log_dir, "' (", prefix, ": ", reason(), ")");
  }
  struct stat st {};
  LOOM_CHECK(stat(log_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "SummaryWriter: the log folder '", log_dir,
             "' is not a folder");
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

SummaryWriter::SummaryWriter(std::string log_dir, SummaryWriterOptions options)
    : log_dir_(std::move(log_dir)), options_(std::move(options)) {
  LOOM_CHECK(options_.max_queue >= 1, "SummaryWriter: max_queue ", options_.max_queue, "; at least 1");
  LOOM_CHECK(options_.flush_secs >= 0, "SummaryWriter: flush_secs ", options_.flush_secs, "; at least 0");
  make_folders(log_dir_);
  const double now = unix_seconds();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%010lld", static_cast<long long>(now));
  const std::string stem = log_dir_ + "/events.out.tfevents." + seconds + "." + host_name() + "." +
                           std::to_string(getpid()) + ".";
  // Exclusive create: an existing file (another writer's) is never appended
  // to, nor a link planted there followed; the next number is tried instead.
  for (int n = 0; fd_ < 0; ++n) {
    path_ = stem + std::to_string(n) + options_.filename_suffix;
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_APPEND, 0644);
    if (fd_ < 0 && (errno != EEXIST || n == 999))
      LOOM_FAIL("SummaryWriter: cannot write in the log folder '", log_dir_, "' (", path_, ": ", reason(), ")");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  append(file_version_event(now));
  write_buffered();  // the file is a valid, empty event file from the start
}

SummaryWriter::~SummaryWriter() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t global_step) {
  add_scalar(tag, value, global_step, unix_seconds());
}

void SummaryWriter::add_scalar(const std::string& tag, double value, int64_t global_step, double walltime) {
  std::lock_guard<std::mutex> lock(mutex_);
  append(scalar_event(walltime, global_step, tag, static_cast<float>(value)));
}

void SummaryWriter::add_histogram(const std::string& tag, const std::vector<double>& values, int64_t global_step,
                                  int bins) {
  const std::string event = histogram_event(unix_seconds(), global_step, tag, make_histogram(values, bins));
  std::lock_guard<std::mutex> lock(mutex_);
  append(event);
}

void SummaryWriter::add_histogram(const std::string& tag, const Tensor& values, int64_t global_step, int bins) {
  LOOM_CHECK(values.defined(), "SummaryWriter::add_histogram: '", tag, "' is an undefined tensor");
  const Tensor host = values.detach().to(Device::cpu(), kFloat64).contiguous();
  const double* p = host.data_ptr<double>();
  add_histogram(tag, std::vector<double>(p, p + host.numel()), global_step, bins);
}

void SummaryWriter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ >= 0) write_buffered();
}

void SummaryWriter::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) return;
  write_buffered();
  const int fd = fd_;
  fd_ = -1;
  // Durable at the end of a run; between flushes readers on this machine see
  // the written records without it, as TensorFlow's writer does.
  const bool synced = fsync(fd) == 0;
  const std::string why = reason();
  ::close(fd);
  LOOM_CHECK(synced, "SummaryWriter: cannot sync ", path_, ": ", why);
}

void SummaryWriter::append(const std::string& event) {
  LOOM_CHECK(fd_ >= 0, "SummaryWriter: ", path_, " is closed (after close() or a failed write)");
  buffer_ += record(event);
  ++buffered_records_;
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_write_).count();
  if (buffered_records_ >= options_.max_queue || waited >= options_.flush_secs) write_buffered();
}

void SummaryWriter::write_buffered() {
  last_write_ = std::chrono::steady_clock::now();
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t written = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {
      // A record may now be cut short: nothing may follow it, so the file closes.
      const std::string why = written < 0 ? reason() : "nothing written";
      ::close(fd_);
      fd_ = -1;
      buffer_.clear();
      LOOM_FAIL("SummaryWriter: cannot write to ", path_, ": ", why);
    }
    done += static_cast<size_t>(written);
  }
  buffer_.clear();
  buffered_records_ = 0;
}

}  // namespace loom::tensorboard
