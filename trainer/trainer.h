#pragma once
// lt::Trainer wires the parts of a run together: options, strategy,
// callbacks, logger, loops. It holds the run's state in one RunState and
// passes each loop a LoopContext; nothing else reaches into it.
//
//   auto model = std::make_shared<MyModule>();
//   lt::Trainer trainer(lt::TrainerOptions().max_epochs(3));
//   trainer.fit(model, datamodule);

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/data_module.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/seed.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/loops/evaluation_loop.h>
#include <lightning_cpp/loops/fit_loop.h>
#include <lightning_cpp/loops/prediction_loop.h>

namespace lt {

// Trainer::fit's optional arguments (Lightning's val_dataloaders= and ckpt_path=).
struct FitOptions {
  // The validation data (run where the module has a validation_step).
  TORCH_ARG(std::shared_ptr<DataLoader>, val);
  // A checkpoint to resume from: a path, "last" or "best"; empty: a fresh run.
  TORCH_ARG(std::string, ckpt_path);
};

namespace detail {
template <typename M>
using if_own_module = std::enable_if_t<std::is_base_of_v<LightningModule, M> && !std::is_same_v<M, LightningModule>>;
}  // namespace detail

class Trainer {
 public:
  explicit Trainer(TrainerOptions options = {});
  ~Trainer();

  void fit(const std::shared_ptr<LightningModule>& module, const std::shared_ptr<DataModule>& data,
           const std::string& ckpt_path = {});
  void fit(const std::shared_ptr<LightningModule>& module, std::shared_ptr<DataLoader> train,
           std::shared_ptr<DataLoader> val = nullptr, const std::string& ckpt_path = {});
  // fit's optional arguments by name: fit(model, train, lt::FitOptions().val(val).ckpt_path("last")).
  void fit(const std::shared_ptr<LightningModule>& module, std::shared_ptr<DataLoader> train,
           const FitOptions& options);
  // ckpt_path: the weights to evaluate (a path, "last" or "best"); empty: the module's own.
  Metrics validate(const std::shared_ptr<LightningModule>& module,
                                         const std::shared_ptr<DataModule>& data, const std::string& ckpt_path = {});
  Metrics validate(const std::shared_ptr<LightningModule>& module,
                                         std::shared_ptr<DataLoader> val, const std::string& ckpt_path = {});
  Metrics test(const std::shared_ptr<LightningModule>& module,
                                     const std::shared_ptr<DataModule>& data, const std::string& ckpt_path = {});
  Metrics test(const std::shared_ptr<LightningModule>& module, std::shared_ptr<DataLoader> test,
                                     const std::string& ckpt_path = {});
  std::vector<torch::Tensor> predict(const std::shared_ptr<LightningModule>& module,
                                     const std::shared_ptr<DataModule>& data, const std::string& ckpt_path = {});
  std::vector<torch::Tensor> predict(const std::shared_ptr<LightningModule>& module,
                                     std::shared_ptr<DataLoader> loader, const std::string& ckpt_path = {});

  // A module of its own type (std::shared_ptr<MyModule>, a TORCH_MODULE
  // holder), for every stage: the Trainer then knows whether it implements
  // validation_step and test_step (LightningModule::has_validation_step).
#define LT_STAGE_OVERLOADS(stage)                                                        \
  template <typename M, typename... Rest, typename = detail::if_own_module<M>>          \
  auto stage(const std::shared_ptr<M>& module, Rest&&... rest) {                         \
    return stage(detail::ModuleAccess::seen(module), std::forward<Rest>(rest)...);     \
  }                                                                                      \
  template <typename Impl, typename... Rest>                                             \
  auto stage(const torch::nn::ModuleHolder<Impl>& holder, Rest&&... rest) {              \
    return stage(holder.ptr(), std::forward<Rest>(rest)...);                             \
  }
  LT_STAGE_OVERLOADS(fit)
  LT_STAGE_OVERLOADS(validate)
  LT_STAGE_OVERLOADS(test)
  LT_STAGE_OVERLOADS(predict)
#undef LT_STAGE_OVERLOADS

  // -- what callbacks and users read -------------------------------------------
  const TrainerOptions& options() const { return options_; }
  // Lightning's `trainer.accumulate_grad_batches = k` (GradientAccumulationScheduler):
  // takes effect at the next training epoch's start.
  void set_accumulate_grad_batches(int64_t k);
  RunState& state() { return state_; }
  const RunState& state() const { return state_; }
  Strategy& strategy();
  Logger* logger() const { return options_.logger().get(); }
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return options_.callbacks(); }
  const std::map<std::string, double>& callback_metrics() const { return state_.callback_metrics; }
  int64_t current_epoch() const { return state_.current_epoch; }
  int64_t global_step() const { return state_.global_step; }
  bool is_global_zero();
  void set_should_stop(bool stop) { state_.should_stop = stop; }
  // default_root_dir, or the logger's folder when there is one; with several
  // ranks, rank 0's (agreed at the first run), so every path is the same.
  std::string log_dir() const;
  // Where a stop on request writes its checkpoint: <log_dir()>/interrupted.ckpt
  // (absolute); `ckpt_path: last` takes it when it is the run's newest.
  std::string interrupted_checkpoint_path() const;
  LightningModule* module() const { return module_; }
  OptimizerConfig* optimizer_config() { return optim_.optimizer ? &optim_ : nullptr; }

  // -- checkpoints (trainer/checkpoint.cpp) ------------------------------------
  // Everything a resume needs; see core/training_state.h for the layout.
  StateDict dump_checkpoint();
  void save_checkpoint(const std::string& path);
  // Returns the checkpoint's dict.
  StateDict restore_checkpoint(const std::string& path);
  // The module's weights alone (validate, test, predict with a ckpt_path),
  // read through the strategy's CheckpointIO: a checkpoint's state_dict or a
  // bare state dict (torch.save(model.state_dict())).
  void restore_weights(const std::string& path);

  // -- loops (replaceable) -----------------------------------------------------
  FitLoop& fit_loop() { return *fit_loop_; }
  void set_fit_loop(std::shared_ptr<FitLoop> loop) { fit_loop_ = std::move(loop); }
  void set_evaluation_loop(std::shared_ptr<EvaluationLoop> loop) { evaluation_loop_ = std::move(loop); }
  void set_prediction_loop(std::shared_ptr<PredictionLoop> loop) { prediction_loop_ = std::move(loop); }

 private:
  struct Run;
  // What a run trains or evaluates on, made inside the run (a DataModule's
  // prepare_data, its barrier and setup are part of the run's error path).
  struct RunData {
    std::shared_ptr<DataLoader> loader;  // train, or the evaluated / predicted data
    std::shared_ptr<DataLoader> val;     // fit only
    HParams hparams;                     // the DataModule's
  };
  // The one lifecycle of fit, validate, test and predict: the environment
  // (a local spawn's supervisor never returns from it), then the strategy's
  // run start, then inside one try every collective of the run: `data`, the
  // setup (begin), `body`; a failure on any rank goes through fail().
  void run_stage(const std::shared_ptr<LightningModule>& module, Stage stage, const std::string& ckpt_path,
                 const std::function<RunData()>& data, const std::function<void(Run&, RunData&)>& body);
  // Tells a DataModule its ranks (after the environment is set up).
  void place(DataModule& data) const;
  std::unique_ptr<Run> begin(const std::shared_ptr<LightningModule>& module, Stage stage,
                             const std::string& ckpt_path);
  void end(Run& run);
  // `run` is null when the run failed before its setup finished.
  [[noreturn]] void fail(Run* run, const std::exception& caught);
  std::string resolve_ckpt_path(const std::string& ckpt_path, Run& run, bool restarted = false);
  void fit_stage(const std::shared_ptr<LightningModule>& module, const std::function<RunData()>& data,
                 const std::string& ckpt_path);
  std::shared_ptr<DataLoader> prepare_loader(std::shared_ptr<DataLoader> loader, Stage stage);
  bool overfits() const;  // overfit_batches > 0
  // In the constructor: fast_dev_run's and overfit_batches' limits; the progress bar and model summary.
  void apply_debug_modes();
  void add_default_callbacks();
  Metrics evaluate(const std::shared_ptr<LightningModule>& module,
                                         const std::function<RunData()>& data, Stage stage,
                                         const std::string& ckpt_path);
  std::vector<torch::Tensor> predict_stage(const std::shared_ptr<LightningModule>& module,
                                           const std::function<RunData()>& data, const std::string& ckpt_path);

  TrainerOptions options_;
  std::shared_ptr<Strategy> strategy_;
  RunState state_;
  std::optional<std::string> agreed_log_dir_;  // rank 0's log_dir(), with several ranks
  LightningModule* module_ = nullptr;
  OptimizerConfig optim_;
  // fit's training data while fit runs (its failure path included): which
  // samples of the epoch a checkpoint's run trained (data/epoch_samples.h).
  std::shared_ptr<DataLoader> fit_loader_;
  HParams fit_datamodule_hparams_;  // fit's DataModule's, while fit_loader_ is set
  std::map<Stage, ResultCollection> results_;
  std::shared_ptr<FitLoop> fit_loop_;
  std::shared_ptr<EvaluationLoop> evaluation_loop_;
  std::shared_ptr<PredictionLoop> prediction_loop_;
};

}  // namespace lt
