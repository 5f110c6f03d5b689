#pragma once
// Profilers (Lightning's `profiler: simple | pytorch`): the loops time their
// phases and every callback hook as named actions, Lightning's names:
//   run_training_epoch, [_TrainingEpochLoop].train_dataloader_next,
//   [Strategy]ddp.training_step, [Strategy]ddp.backward (the gradient sync
//   included), [Strategy]ddp.optimizer_step, [Strategy]ddp.join (a rank that
//   ran out of data shadowing the others), [_EvaluationLoop].val_next,
//   [Strategy]ddp.validation_step, [Callback]ModelCheckpoint.on_train_epoch_end
// SimpleProfiler prints each action's mean and total time at the end of the
// stage on rank 0 (all ranks: per_rank); TorchProfiler runs LibTorch's
// autograd profiler over the stage and writes a Chrome trace
// (<log_dir>/<stage>-trace-rank<r>.json, chrome://tracing or Perfetto) in
// which the actions show as user scopes around the operators they ran.
// Without a profiler (the default) an action costs one null check.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <lightning_cpp/core/types.h>

namespace at {
class RecordFunction;
}
namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace lt {

class Profiler {
 public:
  virtual ~Profiler() = default;
  virtual void start(const std::string& action) = 0;
  virtual void stop(const std::string& action) = 0;
  // Around a stage (fit, validate, test, predict) of the Trainer, on every rank.
  virtual void setup(Stage /*stage*/, int64_t /*rank*/, const std::string& /*log_dir*/) {}
  virtual void teardown(Stage /*stage*/) {}
};

// Times `action` for its scope; nothing without a profiler.
class ProfileScope {
 public:
  ProfileScope(Profiler* profiler, const char* action) : profiler_(profiler) {
    if (profiler_ != nullptr) profiler_->start(action_ = action);
  }
  // The action's name is prefix + name + suffix, put together only when profiling.
  ProfileScope(Profiler* profiler, const char* prefix, const std::string& name, const char* suffix)
      : profiler_(profiler) {
    if (profiler_ != nullptr) profiler_->start(action_ = prefix + name + suffix);
  }
  ~ProfileScope() {
    if (profiler_ != nullptr) profiler_->stop(action_);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Profiler* profiler_;
  std::string action_;
};

struct SimpleProfilerOptions {
  // Print every rank's report (each names its rank), not rank 0's only.
  bool per_rank = false;
};

class SimpleProfiler : public Profiler {
 public:
  explicit SimpleProfiler(SimpleProfilerOptions options = {}) : options_(options) {}
  void start(const std::string& action) override;
  void stop(const std::string& action) override;
  void setup(Stage stage, int64_t rank, const std::string& log_dir) override;
  void teardown(Stage stage) override;
  // Lightning's table: action, mean duration, calls, total time, percentage
  // of the stage, by total time.
  std::string summary() const;

  struct Stats {
    int64_t calls = 0;
    double total_s = 0.0;
  };
  const std::map<std::string, Stats>& stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  SimpleProfilerOptions options_;
  std::map<std::string, Clock::time_point> running_;
  std::map<std::string, Stats> stats_;
  Clock::time_point stage_start_;
  Stage stage_ = Stage::kNone;
  int64_t rank_ = 0;
};

class TorchProfiler : public Profiler {
 public:
  TorchProfiler();
  ~TorchProfiler() override;
  void start(const std::string& action) override;
  void stop(const std::string& action) override;
  void setup(Stage stage, int64_t rank, const std::string& log_dir) override;
  void teardown(Stage stage) override;
  // The trace file of the last stage.
  const std::string& trace_file() const { return trace_file_; }

 private:
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recording_;
  std::map<std::string, std::unique_ptr<at::RecordFunction>> running_;
  std::string trace_file_;
};

}  // namespace lt
