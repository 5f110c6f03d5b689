#pragma once
// lt::Timer: tracks time per stage and stops fit once `duration` has passed
// (Lightning's Timer). The check runs after every training step or at every
// epoch end; the decision is reduced across ranks so that all stop together.
// The elapsed training time is saved in checkpoints, so a resumed run keeps
// counting from where it stopped.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

// YAML's Timer duration: a string, "DD:HH:MM:SS" or a shorter form (parse_duration); null: none.
struct DurationText {
  using Duration = std::optional<std::chrono::duration<double>>;
  static void add(ArgSchema& schema, const char* name, const Duration& d, const char* doc,
                  std::vector<std::string> choices);
  static Duration read(const InitArgs& args, const char* name);
  static std::string show(const Duration& duration);
};

// The options, each with its /// doc above its row: callbacks/timer_options.def.
struct TimerOptions {
#define LT_OPTION LT_OPTION_ARG
#define LT_OPTION_WITH LT_OPTION_WITH_ARG
#include <lightning_cpp/callbacks/timer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
};

// "DD:HH:MM:SS" (Lightning's string form), or "HH:MM:SS", "MM:SS", "SS"; throws lt::ValueError.
std::chrono::duration<double> parse_duration(const std::string& text);

class Timer : public Callback {
 public:
  explicit Timer(TimerOptions options = {});
  std::string name() const override { return "Timer"; }

  void on_train_start(Trainer& trainer, LightningModule& module) override;
  void on_train_end(Trainer& trainer, LightningModule& module) override;
  void on_validation_start(Trainer& trainer, LightningModule& module) override;
  void on_validation_end(Trainer& trainer, LightningModule& module) override;
  void on_test_start(Trainer& trainer, LightningModule& module) override;
  void on_test_end(Trainer& trainer, LightningModule& module) override;
  void on_after_optimizer_step(Trainer& trainer, LightningModule& module) override;
  JoinSupport join_support(const TrainerOptions& options) const override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  // Seconds spent in `stage` ("train", "validate", "test"), including a restored offset.
  double time_elapsed(const std::string& stage = "train") const;
  // Seconds left of `duration` in training; nullopt without a duration.
  std::optional<double> time_remaining() const;

 private:
  using Clock = std::chrono::steady_clock;
  void start(const std::string& stage);
  void stop(const std::string& stage);
  void check(Trainer& trainer);

  TimerOptions options_;
  std::map<std::string, Clock::time_point> started_;
  std::map<std::string, double> accumulated_;  // closed intervals + restored offset
};

}  // namespace lt
