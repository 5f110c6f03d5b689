#pragma once
// lt::ThroughputMonitor: training throughput (Lightning's ThroughputMonitor),
// logged every log_every_n_steps optimizer steps under Lightning's keys:
//   train/time, train/batches, train/samples, train/lengths   this rank's totals (time: seconds of training,
//                                                              validation left out)
//   train/device/batches_per_sec, .../samples_per_sec,         this rank's rates over the window (the last
//   .../items_per_sec, .../flops_per_sec, .../mfu              window_size optimizer steps)
//   train/batches_per_sec, train/samples_per_sec, ...,         with several ranks: every rank's counts in the
//   train/flops_per_sec, train/mfu                             window summed, over the window's mean time
//   train/rank<r>/samples_per_sec, .../batches_per_sec         log_per_rank
// Unlike Lightning's, the global rates are counted, not this rank's times the
// world size: ranks with uneven inputs train different numbers of samples, and
// a rank that ran out of data (lockstep Join) adds none while it waits.
// Items need a length (`length: data` or length_fn); FLOPs need
// flops_per_batch or measure_flops; MFU divides by peak_flops or the measured
// matrix-product rate of the device (core/throughput.h).
// The rates are gathered after optimizer steps, a collective every rank
// issues, a rank that ran out of data too in lockstep Join (refused under
// Join's other modes with several ranks). On CUDA each step's end is
// synchronized with the device (as Lightning's), so that its time is the GPU's.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/throughput.h>

namespace lt {

// How many samples or items a batch holds.
using BatchCount = std::function<int64_t(const Batch&)>;

// The options, each with its /// doc above its row: callbacks/throughput_monitor_options.def.
struct ThroughputMonitorOptions {
#define LT_OPTION LT_OPTION_ARG
#define LT_CPP_OPTION LT_CPP_OPTION_ARG
#include <lightning_cpp/callbacks/throughput_monitor_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
};

class ThroughputMonitor : public Callback {
 public:
  explicit ThroughputMonitor(ThroughputMonitorOptions options = {});
  std::string name() const override { return "ThroughputMonitor"; }
  JoinSupport join_support(const TrainerOptions& options) const override;

  void on_fit_start(Trainer& trainer, LightningModule& module) override;
  void on_train_start(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void on_after_backward(Trainer& trainer, LightningModule& module) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;
  void on_after_optimizer_step(Trainer& trainer, LightningModule& module) override;
  void on_validation_start(Trainer& trainer, LightningModule& module) override;
  void on_validation_end(Trainer& trainer, LightningModule& module) override;

  // What was computed at the last log point, on every rank (rank 0 logs it).
  const std::map<std::string, double>& last_metrics() const { return last_; }
  // FLOPs of a batch: flops_per_batch, or what measure_flops counted (0 before).
  double flops_per_batch() const { return flops_per_batch_; }
  // The FLOP/s MFU divides by: peak_flops, or the measured rate (0: none).
  double peak_flops() const { return peak_flops_; }

 private:
  double seconds(Trainer& trainer) const;
  std::map<std::string, double> compute(Trainer& trainer);

  ThroughputMonitorOptions options_;
  Throughput throughput_;
  ThroughputRecord counts_;  // this rank's totals so far (time unset)
  double flops_per_batch_ = 0;
  double peak_flops_ = 0;
  FlopCounter flop_counter_;
  bool flops_measured_ = false;
  std::chrono::steady_clock::time_point start_;
  std::optional<std::chrono::steady_clock::time_point> paused_;  // validation running since
  double paused_seconds_ = 0;
  std::map<std::string, double> last_;
};

}  // namespace lt
