#pragma once
// lt::DeviceStatsMonitor: the device's and the host's memory and load at the
// start and end of training batches (Lightning's DeviceStatsMonitor), every
// log_every_n_steps optimizer steps, under Lightning's keys:
//   DeviceStatsMonitor.on_train_batch_start/<stat>, DeviceStatsMonitor.on_train_batch_end/<stat>
// The stats (rank 0's go to the logger; every rank's are in last_stats()):
//   cpu_stats   cpu_percent (the host's CPUs busy since the last sample, %), cpu_vm_percent (the host's memory
//               in use, %), cpu_swap_percent (psutil's names, from /proc), and this process's:
//               process_cpu_percent (CPU time over wall time since the last sample, % of one core),
//               process_rss_bytes and process_peak_rss_bytes (VmRSS, VmHWM)
//   on CUDA     the caching allocator's allocated_bytes.all.current/.peak, reserved_bytes.all.current/.peak,
//               active_bytes..., requested_bytes..., num_alloc_retries, num_ooms (torch.cuda.memory_stats'
//               names) and memory_free_bytes, memory_total_bytes (LibTorch 2.11; none with 1.13). The GPU's
//               utilization is not read: it needs NVML, which LibTorch does not expose.
// Reads only local files and the allocator: no collective, nothing to match
// under Join.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace lt {

// The options, each with its /// doc above its row: callbacks/device_stats_monitor_options.def.
struct DeviceStatsMonitorOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/callbacks/device_stats_monitor_options.def>
#undef LT_OPTION
};

// The host's and this process's CPU and memory; the percentages are taken
// since the previous call (since construction at the first).
class CpuStats {
 public:
  CpuStats();
  std::map<std::string, double> sample();

 private:
  double host_busy_ = 0, host_total_ = 0;    // /proc/stat, clock ticks
  double process_cpu_ = 0, wall_ = 0;        // seconds
};

class DeviceStatsMonitor : public Callback {
 public:
  explicit DeviceStatsMonitor(DeviceStatsMonitorOptions options = {});
  std::string name() const override { return "DeviceStatsMonitor"; }

  void on_train_batch_start(Trainer& trainer, LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void on_train_batch_end(Trainer& trainer, LightningModule& module, const torch::Tensor& loss, const Batch& batch,
                          int64_t batch_idx) override;

  // What the last sample logged (or, off rank 0, would have), with its keys.
  const std::map<std::string, double>& last_stats() const { return last_; }

 private:
  void log(Trainer& trainer, const char* hook);

  DeviceStatsMonitorOptions options_;
  CpuStats cpu_;
  bool log_this_batch_ = false;
  std::map<std::string, double> last_;
};

}  // namespace lt
