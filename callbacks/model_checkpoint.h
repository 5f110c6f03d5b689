#pragma once
// lt::ModelCheckpoint: saves checkpoints during fit (Lightning's
// ModelCheckpoint): the top-k by a monitored metric, or the latest when no
// metric is monitored, plus optionally last.ckpt. Files are written atomically
// (a temporary file, then rename) by Trainer::save_checkpoint, on rank 0.
//
// Filename templates use Python's format syntax on the monitored metrics plus
// `epoch` and `step`: "{epoch}-{val_loss:.2f}" gives "epoch=3-val_loss=0.42.ckpt"
// (auto_insert_metric_name) or "3-0.42.ckpt" without it.

#include <map>
#include <optional>
#include <set>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

// The options, each with its /// doc above its row: callbacks/model_checkpoint_options.def.
struct ModelCheckpointOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/callbacks/model_checkpoint_options.def>
#undef LT_OPTION
};

class ModelCheckpoint : public Callback {
 public:
  static constexpr const char* kFileExtension = ".ckpt";
  static constexpr const char* kNameLast = "last";

  explicit ModelCheckpoint(ModelCheckpointOptions options = {});

  std::string name() const override { return "ModelCheckpoint"; }
  std::string state_key() const override;
  int priority() const override { return kMonitorPriority; }
  // Compatible, except every_n_train_steps > 0: a save after a step runs a
  // barrier a joined rank reaches only in lockstep Join.
  JoinSupport join_support(const TrainerOptions& options) const override;

  void setup(Trainer& trainer, LightningModule& module, Stage stage) override;
  // After a resume's restore: warns about the .ckpt files in dirpath that no
  // ModelCheckpoint of this run keeps (an earlier run's, or one left by a run
  // killed between saving a new top-k file and removing the one it replaced):
  // they count toward no top-k and are never removed. Only where every
  // ModelCheckpoint writing there bounds its files (save_top_k >= 1).
  void on_train_start(Trainer& trainer, LightningModule& module) override;
  void on_after_optimizer_step(Trainer& trainer, LightningModule& module) override;
  // After setup: "last": the newest .ckpt in dirpath; "best": best_model_path()
  // or, before this callback saved or loaded one, the newest checkpoint's.
  std::string checkpoint_path(const std::string& which) const override;
  std::string checkpoint_dir() const override { return dirpath_; }
  void on_train_epoch_end(Trainer& trainer, LightningModule& module) override;

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  // The file name (without folder) for these metrics; `version` > 0 appends "-v<version>".
  std::string format_checkpoint_name(const std::map<std::string, double>& metrics,
                                     const std::string& filename = {}, int version = 0) const;

  const ModelCheckpointOptions& options() const { return options_; }
  const std::string& dirpath() const { return dirpath_; }
  const std::string& best_model_path() const { return best_model_path_; }
  std::optional<double> best_model_score() const { return best_model_score_; }
  const std::string& last_model_path() const { return last_model_path_; }
  const std::string& kth_best_model_path() const { return kth_best_model_path_; }
  // path -> monitored value of every kept top-k checkpoint.
  const std::map<std::string, double>& best_k_models() const { return best_k_models_; }

 private:
  void save(Trainer& trainer);
  std::map<std::string, double> monitor_candidates(const Trainer& trainer) const;
  void save_topk(Trainer& trainer, const std::map<std::string, double>& candidates);
  void save_monitored(Trainer& trainer, const std::map<std::string, double>& candidates, double current);
  void save_unmonitored(Trainer& trainer, const std::map<std::string, double>& candidates);
  void save_last(Trainer& trainer, const std::map<std::string, double>& candidates);
  // A path for these metrics that does not overwrite an existing file other than `replaceable`.
  std::string unique_path(const std::map<std::string, double>& candidates, const std::string& replaceable) const;
  void write(Trainer& trainer, const std::string& path);
  void remove(Trainer& trainer, const std::string& path);
  bool better(double a, double b) const { return options_.mode() == "min" ? a < b : a > b; }
  // The files of dirpath this callback keeps track of (top-k, best, last).
  std::set<std::string> kept_files() const;

  ModelCheckpointOptions options_;
  int64_t every_n_epochs_ = 1;
  std::string dirpath_;
  std::map<std::string, double> best_k_models_;
  std::string kth_best_model_path_;
  double kth_value_ = 0.0;
  std::string best_model_path_;
  std::optional<double> best_model_score_;
  std::string last_model_path_;
  int64_t last_global_step_saved_ = -1;
  bool warned_missing_monitor_ = false;  // the monitored key not yet logged: warned once
};

}  // namespace lt
