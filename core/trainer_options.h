#pragma once
// lt::TrainerOptions: Lightning's Trainer arguments as a LibTorch-style
// options struct, e.g. lt::TrainerOptions().max_epochs(10).accumulate_grad_batches(4).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>
#include <torch/arg.h>

#include <lightning_cpp/core/types.h>

namespace lt {

class Callback;
class Logger;
class Precision;
class Profiler;
class Strategy;

enum class GradientClipAlgorithm { kNorm, kValue };

// What the training loop does when the loss or a gradient is NaN or infinite.
enum class NonFinitePolicy {
  kIgnore,    // step anyway (PyTorch's and Lightning's behaviour)
  kSkipStep,  // drop the window's gradients and skip the optimizer step
  kError,     // stop with the epoch, batch, step and the first parameter affected
};

struct TrainerOptions {
  // -1 with max_steps == -1 means 1000 epochs, as in Lightning.
  TORCH_ARG(int64_t, max_epochs) = -1;
  TORCH_ARG(int64_t, max_steps) = -1;
  TORCH_ARG(int64_t, accumulate_grad_batches) = 1;
  // 0 disables clipping.
  TORCH_ARG(double, gradient_clip_val) = 0.0;
  TORCH_ARG(GradientClipAlgorithm, gradient_clip_algorithm) = GradientClipAlgorithm::kNorm;
  // A fraction of the training epoch, or a number of training batches.
  TORCH_ARG(FractionOrCount, val_check_interval) = 1.0;
  TORCH_ARG(int64_t, check_val_every_n_epoch) = 1;
  TORCH_ARG(FractionOrCount, limit_train_batches) = 1.0;
  TORCH_ARG(FractionOrCount, limit_val_batches) = 1.0;
  TORCH_ARG(FractionOrCount, limit_test_batches) = 1.0;
  TORCH_ARG(FractionOrCount, limit_predict_batches) = 1.0;
  TORCH_ARG(int64_t, num_sanity_val_steps) = 2;
  // Lightning's fast_dev_run: n > 0 runs n batches of training, validation,
  // test and predict (one epoch, n steps, no sanity check), with logging and
  // checkpointing suppressed; a smoke test of the whole run. YAML true is 1.
  TORCH_ARG(int64_t, fast_dev_run) = 0;
  // Lightning's overfit_batches: a fraction or count > 0 trains and validates
  // on only that much data, in order (a shuffling training loader is made
  // sequential, with a warning): can the model fit a few batches at all?
  TORCH_ARG(FractionOrCount, overfit_batches) = 0.0;
  TORCH_ARG(std::optional<uint64_t>, seed) = std::nullopt;
  TORCH_ARG(bool, deterministic) = false;
  // Lightning's precision: 32-true, 64-true, bf16-mixed (CPU autocast), 16-mixed
  // (CUDA); see plugins/precision/precision.h.
  TORCH_ARG(std::string, precision) = "32-true";
  // A precision built by hand instead of by name (Lightning's plugins=[...]):
  // lt::MixedPrecision(lt::GradScalerOptions().init_scale(1024)), or a user's.
  TORCH_ARG(std::shared_ptr<Precision>, precision_plugin) = nullptr;
  TORCH_ARG(std::string, default_root_dir) = ".";
  TORCH_ARG(std::vector<std::shared_ptr<Callback>>, callbacks) = {};
  TORCH_ARG(std::shared_ptr<Logger>, logger) = nullptr;
  // Lightning's logger=True: with no logger given, the Trainer logs to a
  // TensorBoardLogger under <default_root_dir>/lightning_logs/version_N (and
  // ModelCheckpoint saves under its checkpoints/). false: no logger unless
  // given (Lightning's logger=False).
  TORCH_ARG(bool, default_logger) = true;
  // Lightning's profiler: lt::SimpleProfiler, lt::TorchProfiler (core/profiler.h); null: none.
  TORCH_ARG(std::shared_ptr<Profiler>, profiler) = nullptr;
  // The strategy, as an object. Unset: the strategy named below.
  TORCH_ARG(std::shared_ptr<Strategy>, strategy) = nullptr;
 public:
  // Or by its registered name, with its default init args:
  //   lt::TrainerOptions().devices(2).strategy("ddp")
  // "auto" (the default): ddp when devices * num_nodes > 1 or the ranks were
  // started by torchrun, srun or mpirun, else single_device (plugins/strategies/registration.h).
  TrainerOptions& strategy(const char* name) {
    strategy_name_ = name != nullptr ? name : "auto";
    return *this;
  }
  TrainerOptions& strategy(const std::string& name) { return strategy(name.c_str()); }
  TrainerOptions& strategy(std::nullptr_t) {
    strategy_ = nullptr;
    strategy_name_ = "auto";
    return *this;
  }
  const std::string& strategy_name() const { return strategy_name_; }
  TORCH_ARG(std::string, accelerator) = "cpu";
  TORCH_ARG(int64_t, devices) = 1;
  TORCH_ARG(int64_t, num_nodes) = 1;
  TORCH_ARG(int64_t, log_every_n_steps) = 50;
  // Checked after gradients are synchronized, so under DDP every rank decides alike.
  TORCH_ARG(NonFinitePolicy, on_nonfinite) = NonFinitePolicy::kError;
  // Stop at the next step boundary on SIGINT/SIGTERM and write interrupted.ckpt (core/signals.h).
  TORCH_ARG(bool, handle_signals) = true;
  // A ProgressBar unless one is among the callbacks (Lightning's default).
  TORCH_ARG(bool, enable_progress_bar) = true;
  // A ModelSummary unless one is among the callbacks (Lightning's default).
  TORCH_ARG(bool, enable_model_summary) = true;
  // Lightning's: true, a strategy that shards (DDP) replaces each loader's
  // sequential or random sampler by its rank's shard; false, every loader is
  // used as given (per-rank datasets, a sampler that shards by itself). The
  // ranks' batch counts then decide what uneven_inputs does.
  TORCH_ARG(bool, use_distributed_sampler) = true;


 public:
  // Checks every value; throws lt::ValueError naming the option and the valid range.
  void validate() const;
  // The device type `accelerator` names: cpu; cuda; auto = cuda where
  // available, else cpu. The one place that reads accelerator.
  c10::DeviceType device_type() const;
  // max_epochs after Lightning's defaulting (-1 and no max_steps: 1000).
  int64_t resolved_max_epochs() const { return max_epochs() == -1 && max_steps() == -1 ? 1000 : max_epochs(); }

 private:
  std::string strategy_name_ = "auto";
};

}  // namespace lt
