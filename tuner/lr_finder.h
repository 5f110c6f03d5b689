#pragma once
// The learning-rate range test (Lightning's tuner/lr_finder.py, `Tuner.lr_find`):
// num_training optimizer steps whose rate grows from min_lr to max_lr, each
// step's loss smoothed as Lightning smooths it; the suggestion is the rate
// where the smoothed loss falls fastest. Lightning's rules, kept to the letter
// so that a sweep here and there suggest the same rate from the same losses
// (tests/python/lr_find_oracle.py runs Lightning 2.6's own code on ours):
//   - the rate of step k: min_lr at k = 0, then min_lr * (max_lr / min_lr)^((k + 1) / num_training)
//     (exponential) or min_lr + (k + 1) / num_training * (max_lr - min_lr) (linear): the last step runs
//     at max_lr;
//   - after step k (global step g = k + 1): avg = 0.98 avg + 0.02 loss, smoothed = avg / (1 - 0.98^(g + 1));
//     the sweep stops once g > 1 and smoothed > early_stop_threshold * best (best: the lowest smoothed so
//     far, the first one at g = 1);
//   - suggestion: of the points without the first skip_begin and the last skip_end, the finite ones, the one
//     where torch.gradient of the loss over the rate (float32) is lowest; none from fewer than 2.
// What differs: the loss of a step is the mean of the window's micro-batch
// losses over every rank (Lightning's: the last micro-batch's, on each rank,
// with rank 0's stop decision broadcast), so that every rank records the same
// sweep and takes the same decision; with one rank and no accumulation the two
// are the same.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

// The options, each with its /// doc above its row: tuner/lr_finder_options.def.
struct LRFinderOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/tuner/lr_finder_options.def>
#undef LT_OPTION
 public:  // (TORCH_ARG leaves the struct private)
  // A located error (ValueError) for an option out of its range; `owner` comes first ("lr_find: ").
  void check(const char* owner = "lr_find: ") const;
};

// A sweep's results (Lightning's _LRFinder).
struct LRFinder {
  std::string mode = "exponential";
  std::vector<double> lrs;         // the rate of each step taken (Lightning's results["lr"])
  std::vector<double> losses;      // its smoothed loss (results["loss"])
  std::vector<double> raw_losses;  // its loss before smoothing (the mean over micro-batches and ranks)

  // The suggested rate; none (with the reason on rank 0) where fewer than 2 finite points remain.
  std::optional<double> suggestion(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  // The index of the suggested point in lrs and losses.
  std::optional<int64_t> suggestion_index(int64_t skip_begin = 10, int64_t skip_end = 1) const;
  // The loss over the rate (the rate's axis logarithmic for an exponential
  // sweep), the suggestion a red point, as an SVG image a browser opens.
  // Returns the SVG; written to `path` unless empty.
  std::string plot(const std::string& path = {}, bool suggest = true) const;
};

// Lightning's LearningRateFinder callback, the YAML form of lr_find: the
// lightning-cpp command runs the sweep before `fit` with these options and
// builds the model again with the suggestion as its init arg attr_name (or
// lr / learning_rate). Given to a Trainer in C++ it refuses the fit, naming
// lt::Tuner (a sweep cannot run inside the fit it would tune).
class LearningRateFinder : public Callback {
 public:
  explicit LearningRateFinder(LRFinderOptions options = {});
  std::string name() const override { return "LearningRateFinder"; }
  const LRFinderOptions& options() const { return options_; }
  void on_fit_start(Trainer& trainer, LightningModule& module) override;

 private:
  LRFinderOptions options_;
};

}  // namespace lt
