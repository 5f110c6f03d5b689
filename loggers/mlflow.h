#pragma once
// lt::MLflowLogger: Lightning's MLFlowLogger on MLflow's local file store,
// written here (no MLflow library, no server): the layout MLflow's own
// FileStore writes and reads, which `mlflow ui --backend-store-uri
// file:./mlruns` and MlflowClient("file:./mlruns") open:
//   <store>/<experiment id>/meta.yaml                    the experiment (name, artifact location)
//   <store>/<experiment id>/<run id>/meta.yaml           the run (status, start and end time)
//   .../<run id>/params/<key>                             a hyperparameter (Lightning's: str(value)[:250])
//   .../<run id>/metrics/<key>                            "<unix ms> <value> <step>" per logged value
//   .../<run id>/tags/<key>                               mlflow.runName and the given tags
//   .../<run id>/artifacts/                               the run's files (log_artifact)
// MLflow 3.x keeps the file store in "maintenance mode": its client opens it
// with MLFLOW_ALLOW_FILE_STORE=true, and `mlflow migrate-filestore` moves it
// to a database. As Lightning's: metric keys lose the characters MLflow does
// not allow (one warning), the run's name is its version, its experiment id
// the logger's name, <store>/<experiment id>/<run id> its log_dir (where a
// ModelCheckpoint without dirpath saves); finalize ends the run FINISHED or
// FAILED. A resume goes on in the same run (continue_previous: the
// experiment's newest run; continue_version_of: the run a checkpoint lies in),
// and its checkpoint's state drops what the interrupted run logged after the
// checkpoint (TensorBoard's purge_step). Nothing is written before the first
// write. Metrics are appended as they are logged (no buffer).

#include <cstdint>
#include <map>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

using StringMap = std::map<std::string, std::string>;

// The options, each with its /// doc above its row: loggers/mlflow_options.def.
struct MLflowLoggerOptions {
#define LT_OPTION LT_OPTION_ARG
#define LT_CPP_OPTION LT_CPP_OPTION_ARG
#include <lightning_cpp/loggers/mlflow_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
};

class MLflowLogger : public Logger {
 public:
  explicit MLflowLogger(MLflowLoggerOptions options = {});
  // The experiment's id (Lightning's MLFlowLogger.name), fixed at the first call.
  std::string name() const override;
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override;
  void log_hyperparams(const HParams& params) override;
  // "success" or "finished": FINISHED; anything else: FAILED.
  void finalize(const std::string& status) override;
  // <store>/<experiment id>/<run id>.
  std::string log_dir() const override;
  void continue_previous() override;
  void continue_version_of(const std::string& checkpoint) override;
  // {"run_id", "step": the highest step logged}: a resumed run logs into the same MLflow run.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

  // The run's id (Lightning's version), fixed at the first call.
  const std::string& run_id() const;
  // The file store's folder.
  const std::string& store() const { return store_; }
  // Copies a file into the run's artifacts (under artifact_path, a folder; empty: the top).
  void log_artifact(const std::string& local_path, const std::string& artifact_path = {});

 private:
  void resolve() const;  // fixes the experiment and run ids (writes nothing)
  void open_run();       // writes the experiment's and the run's files at the first write
  void write_run_meta(int status, int64_t end_time_ms);

  MLflowLoggerOptions options_;
  std::string store_;
  mutable std::string experiment_id_, run_id_;
  std::string run_name_;  // fixed when the run is opened
  mutable bool continue_newest_ = false;
  bool opened_ = false;
  bool warned_keys_ = false;
  int64_t start_time_ms_ = 0;
  int64_t last_step_ = -1;
};

}  // namespace lt
