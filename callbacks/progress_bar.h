#pragma once
// lt::ProgressBar: training progress on rank 0 (Lightning's TQDMProgressBar).
// On a terminal it redraws one line per epoch:
//   Epoch 2/10:  45%|#####      | 389/860 [00:03<00:04, 120.5it/s, train_loss_step=0.512, val_acc=0.84]
// The line never passes the terminal's width (the bar narrows, then the
// metrics are cut), so a redraw never wraps into a new line. When the output
// is not a terminal (logs, CI) it prints one plain line per epoch instead, so
// log files do not fill with carriage returns. The Trainer adds one unless
// enable_progress_bar is false or one is given.

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

// The options, each with its /// doc above its row: callbacks/progress_bar_options.def.
struct ProgressBarOptions {
  using StreamPtr = std::ostream*;
#define LT_CPP_OPTION LT_CPP_OPTION_ARG
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/callbacks/progress_bar_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
};

class ProgressBar : public Callback {
 public:
  explicit ProgressBar(ProgressBarOptions options = {});
  std::string name() const override { return "ProgressBar"; }

  void on_train_start(Trainer& trainer, LightningModule& module) override;
  void on_train_epoch_start(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  // After each optimizer step, on a rank that ran out of data (lockstep Join) too:
  // the bar counts the epoch's iterations, the longest rank's.
  void on_after_optimizer_step(Trainer& trainer, LightningModule& module) override;
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;
  void on_test_end(Trainer& trainer, LightningModule& module) override;

  // "[00:03<00:04, 120.5it/s" style pieces, exposed for tests.
  static std::string format_time(double seconds);
  bool is_tty() const { return tty_; }

 private:
  using Clock = std::chrono::steady_clock;
  std::ostream& out() const;
  std::string metrics_str(const Trainer& trainer) const;
  size_t columns() const;
  void draw(const Trainer& trainer, int64_t done, int64_t total, bool final);
  // Draws `done` of the epoch's length, at most ~10 times a second.
  void redraw(const Trainer& trainer, int64_t iterations);

  ProgressBarOptions options_;
  bool tty_ = false;
  bool enabled_ = true;
  Clock::time_point epoch_start_;
  int64_t epoch_first_ = 0;  // the epoch's first iteration run here (a resumed epoch's is not 0)
  Clock::time_point last_draw_;
  size_t last_width_ = 0;
  int64_t max_epochs_ = -1;
};

}  // namespace lt
