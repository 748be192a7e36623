#include "tensor/flop_counter.h"

#include <cstdio>

namespace loom {

namespace detail {
thread_local FlopCounter::Scope* t_flop_scope = nullptr;
}  // namespace detail

FlopCounter::Scope::Scope(FlopCounter& counter) : counter_(&counter), outer_(detail::t_flop_scope) {
  detail::t_flop_scope = this;
}

// Scopes end in reverse order of their start (they are objects on the stack).
FlopCounter::Scope::~Scope() { detail::t_flop_scope = outer_; }

void count_flops(const char* op, int64_t flops) {
  for (FlopCounter::Scope* s = detail::t_flop_scope; s != nullptr; s = s->outer_) {
    // A counter named by two nested scopes counts once.
    bool seen = false;
    for (FlopCounter::Scope* inner = detail::t_flop_scope; inner != s && !seen; inner = inner->outer_)
      seen = inner->counter_ == s->counter_;
    if (!seen) s->counter_->add(op, flops);
  }
}

void FlopCounter::add(const char* op, int64_t flops) {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_[op] += flops;
}

int64_t FlopCounter::total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t sum = 0;
  for (const auto& [op, flops] : counts_) sum += flops;
  return sum;
}

std::map<std::string, int64_t> FlopCounter::by_op() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

int64_t FlopCounter::get(const std::string& op) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counts_.find(op);
  return it == counts_.end() ? 0 : it->second;
}

void FlopCounter::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_.clear();
}

std::string FlopCounter::table() const {
  std::string out;
  char line[128];
  for (const auto& [op, flops] : by_op()) {
    std::snprintf(line, sizeof line, "%-40s %14.6f GFLOP\n", op.c_str(), flops / 1e9);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-40s %14.6f GFLOP\n", "total", total() / 1e9);
  return out + line;
}

}  // namespace loom
