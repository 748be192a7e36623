#include "optim/async_checkpoint.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "tensor/error.h"

namespace loom::optim {
namespace {

// LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS, read strictly: decimal digits, at most
// ten minutes. Unset: no delay.
std::chrono::milliseconds test_delay() {
  constexpr const char* kName = "LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS";
  constexpr long kMax = 600000;
  const char* text = std::getenv(kName);
  if (text == nullptr) return std::chrono::milliseconds(0);
  long value = 0;
  bool ok = *text != '\0';
  for (const char* c = text; ok && *c; ++c) {
    ok = *c >= '0' && *c <= '9' && value <= kMax;
    value = value * 10 + (*c - '0');
  }
  LOOM_CHECK(ok && value <= kMax, kName, " is '", text, "'; expected milliseconds from 0 to ", kMax, " (test-only)");
  return std::chrono::milliseconds(value);
}

}  // namespace

AsyncCheckpoint::~AsyncCheckpoint() {
  if (!thread_.joinable()) return;
  thread_.join();
  if (!error_) return;
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "AsyncCheckpoint: writing %s failed, and nothing asked for the error: %s\n", path_.c_str(),
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "AsyncCheckpoint: writing %s failed, and nothing asked for the error\n", path_.c_str());
  }
}

void AsyncCheckpoint::save(const std::string& path, const nn::Module& model, const Optimizer& optimizer,
                           const TrainingProgress& progress, const CheckpointWriter& writer,
                           std::function<void()> then) {
  wait();  // never two at once; a failure of the last write surfaces here if not before
  const std::chrono::milliseconds delay = test_delay();
  TrainingSnapshot snapshot = snapshot_training_state(model, optimizer, progress, writer);
  path_ = path;
  done_ = false;
  thread_ = std::thread([this, path, delay, snapshot = std::move(snapshot), then = std::move(then)] {
    try {
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
      write_training_snapshot(path, snapshot);
      if (then) then();
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;  // after error_: a reader that sees done_ sees the error
  });
}

void AsyncCheckpoint::check() {
  if (thread_.joinable() && done_.load()) join_and_rethrow();
}

void AsyncCheckpoint::wait() {
  if (thread_.joinable()) join_and_rethrow();
}

void AsyncCheckpoint::join_and_rethrow() {
  thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace loom::optim
