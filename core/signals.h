#pragma once
// Graceful stop on SIGINT/SIGTERM/SIGHUP (what a launcher forwards to its workers):
// the first signal asks the training loop to stop at the next optimizer-step
// boundary, after which the Trainer calls on_exception, rank 0 writes
// interrupted.ckpt in the Trainer's log_dir() and fit throws lt::Interrupted,
// whose message says where the checkpoint is and, on rank 0, how to resume. A second signal
// ends the process at once with exit code 128 + signal.

#include <string>

#include <lightning_cpp/core/check.h>

namespace lt {

// A program whose fit was stopped on request (a signal) exits with this code:
// nothing failed, and the same command with ckpt_path set to the checkpoint
// the message names resumes the run. lightning-cpp's command, the examples
// and a local spawn's supervisor (when every rank stopped so) exit with it.
constexpr int kExitStoppedOnRequest = 3;

class Interrupted : public Error {
 public:
  Interrupted(const std::string& what, int signal, std::string checkpoint = {})
      : Error(what), signal_(signal), checkpoint_(std::move(checkpoint)) {}
  int signal() const { return signal_; }
  // The checkpoint written on the way out (rank 0 writes it; every rank names it); empty if none.
  const std::string& checkpoint() const { return checkpoint_; }
  // How rank 0's message ends: "; resume it with ckpt_path=<checkpoint>".
  static std::string resume_hint(const std::string& checkpoint) { return "; resume it with ckpt_path=" + checkpoint; }
  // The message without that ending (a program that prints its own resume command).
  std::string without_resume_hint() const {
    const std::string text = what(), hint = resume_hint(checkpoint_);
    const bool ends = text.size() >= hint.size() && text.compare(text.size() - hint.size(), hint.size(), hint) == 0;
    return ends ? text.substr(0, text.size() - hint.size()) : text;
  }

 private:
  int signal_;
  std::string checkpoint_;
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
