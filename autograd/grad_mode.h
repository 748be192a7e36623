// Whether ops record autograd history on this thread.
//
//   {
//     NoGradGuard no_grad;      // e.g. around an optimizer step or evaluation
//     w.sub_(lr * w.grad());
//   }
#pragma once

namespace loom {
namespace autograd {

bool grad_enabled();
void set_grad_enabled(bool enabled);

}  // namespace autograd

class NoGradGuard {
 public:
  NoGradGuard() : previous_(autograd::grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace loom
