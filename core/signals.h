#pragma once
// Graceful stop on SIGINT/SIGTERM/SIGHUP (what a launcher forwards to its workers):
// the first signal asks the training loop to stop at the next optimizer-step
// boundary, after which the Trainer calls on_exception, rank 0 writes
// <default_root_dir>/interrupted.ckpt and fit throws lt::Interrupted. A second
// signal ends the process at once with exit code 128 + signal.

#include <lightning_cpp/core/check.h>

namespace lt {

class Interrupted : public Error {
 public:
  Interrupted(const std::string& what, int signal) : Error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Installs the handlers for its lifetime and restores the previous ones after.
class SignalGuard {
 public:
  SignalGuard();
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
};

// The signal received since the guard was installed, or 0.
int interrupt_signal();

}  // namespace lt
