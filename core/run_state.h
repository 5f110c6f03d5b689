#pragma once
// The run's state in one small struct: the Trainer owns it, loops update it,
// callbacks read it (and set should_stop). Checkpoints save the counters.

#include <cstdint>
#include <map>
#include <string>

#include <lightning_cpp/core/types.h>

namespace lt {

class Callback;

struct RunState {
  Stage stage = Stage::kNone;
  int64_t current_epoch = 0;
  int64_t global_step = 0;  // optimizer steps taken (Lightning's global_step)
  int64_t batch_idx = 0;    // index of the current batch in the epoch
  // Iterations of the current training epoch done, as every rank counts them
  // (under Join: the longest rank's micro-batches); a mid-epoch checkpoint
  // saves it and a resumed run starts its epoch there (resume_iteration).
  int64_t epoch_iteration = 0;
  int64_t resume_iteration = 0;
  int64_t num_training_batches = 0;  // this rank's (-1: a stream's, until its end)
  // The current training epoch's iterations as every rank counts them: this
  // rank's batches, or under Join the longest rank's (-1: unknown, a stream's).
  int64_t epoch_length = 0;
  int64_t skipped_steps = 0;  // optimizer steps skipped for non-finite gradients
  bool should_stop = false;
  int interrupted_by = 0;  // the signal that stopped the run, if any (core/signals.h)
  bool sanity_checking = false;
  // Validation loops this fit has run (the sanity check not counted):
  // ModelCheckpoint's monitor may be missing until one has, as in Lightning.
  int64_t validations_run = 0;
  // True from the end of the epoch loop until current_epoch is advanced: a
  // checkpoint written then resumes at the next epoch.
  bool epoch_ended = false;
  // Set by the training loop while it runs hooks a rank that ran out of data
  // (Join) does not run: the hooks' names. A strategy whose ranks may have
  // joined refuses a collective issued then (it could not be matched).
  const char* unmatched_hooks = nullptr;
  // Where such a collective belongs instead, for the refusal (null: the
  // Trainer's hooks that every rank runs).
  const char* unmatched_fix = nullptr;
  // The callback whose hook is running, if any (for messages).
  const Callback* running_callback = nullptr;
  // Latest value of each logged metric (step or epoch), what monitors read.
  std::map<std::string, double> callback_metrics;
  // What went to the logger at the last log call.
  std::map<std::string, double> logged_metrics;
  std::map<std::string, double> progress_bar_metrics;
};

// Sets RunState::unmatched_hooks for a scope (`hooks` may be null: clears
// it, e.g. for an optimizer step every rank takes); restores it on leaving,
// by an exception too.
class UnmatchedHooks {
 public:
  UnmatchedHooks(RunState& state, const char* hooks, const char* fix = nullptr)
      : state_(state), previous_(state.unmatched_hooks), previous_fix_(state.unmatched_fix) {
    state_.unmatched_hooks = hooks;
    state_.unmatched_fix = fix;
  }
  ~UnmatchedHooks() {
    state_.unmatched_hooks = previous_;
    state_.unmatched_fix = previous_fix_;
  }
  UnmatchedHooks(const UnmatchedHooks&) = delete;
  UnmatchedHooks& operator=(const UnmatchedHooks&) = delete;

 private:
  RunState& state_;
  const char* previous_;
  const char* previous_fix_;
};

}  // namespace lt
