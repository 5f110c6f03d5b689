#pragma once
// Logger interface (Lightning's Logger): metrics by step, hyperparameters once.
// Only rank 0 logs; the Trainer does not call loggers on other ranks.

#include <cstdint>
#include <map>
#include <string>

#include <lightning_cpp/core/types.h>

namespace lt {

class Logger {
 public:
  virtual ~Logger() = default;
  virtual std::string name() const = 0;
  virtual void log_metrics(const std::map<std::string, double>& metrics, int64_t step) = 0;
  virtual void log_hyperparams(const HParams& /*params*/) {}
  virtual void save() {}
  virtual void finalize(const std::string& /*status*/) {}
  // Folder for this run's files (metrics, checkpoints); empty if none.
  virtual std::string log_dir() const { return {}; }

  // This run goes on with an earlier one (ckpt_path last or best, or a worker
  // torchrun restarted): called before log_dir() is first read, so that the
  // logger writes where that run wrote (CSVLogger: its newest version folder,
  // appended to) and the checkpoints are found there.
  virtual void continue_previous() {}
  // This run resumes from `checkpoint`, a file's path: when it lies in one of
  // this logger's version folders (a version not set by hand), the run goes
  // on there, as continue_previous (a stop on request's interrupted.ckpt, a
  // ModelCheckpoint's file). Called at the same point.
  virtual void continue_version_of(const std::string& /*checkpoint*/) {}
  // In every checkpoint, under "logger"; a resumed run loads it (CSVLogger:
  // its metrics.csv is cut back to the rows it had at the checkpoint).
  virtual StateDict state_dict() const { return new_state_dict(); }
  virtual void load_state_dict(const StateDict& /*state*/) {}
};

}  // namespace lt
