#include <lightning_cpp/callbacks/throughput_monitor.h>

#include <torch/cuda.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

ThroughputMonitor::ThroughputMonitor(ThroughputMonitorOptions options)
    : options_(std::move(options)),
      throughput_(std::max<int64_t>(options_.window_size(), 2)) {  // window_size is checked below, by name
  {
    const ThroughputMonitorOptions& options = options_;
    const char* owner = "ThroughputMonitor: ";
#define LT_OPTION LT_OPTION_CHECK
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/callbacks/throughput_monitor_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
  }
}

JoinSupport ThroughputMonitor::join_support(const TrainerOptions& /*options*/) const {
  return JoinSupport::needs_lockstep(
      "it gathers every rank's counts after optimizer steps (every log_every_n_steps), which a rank that ran out of "
      "data takes only in lockstep Join",
      "use join_mode: lockstep (the default) with automatic optimization, or uneven_inputs: pad");
}

namespace {
// The dtype the module's matrix products run in under a precision.
torch::ScalarType matmul_dtype(const std::string& precision) {
  if (precision.rfind("bf16", 0) == 0) return torch::kBFloat16;
  if (precision.rfind("16", 0) == 0) return torch::kHalf;
  if (precision.rfind("64", 0) == 0) return torch::kDouble;
  return torch::kFloat;
}
}  // namespace

void ThroughputMonitor::on_fit_start(Trainer& trainer, LightningModule& /*module*/) {
  flops_per_batch_ = options_.flops_per_batch();
  flops_measured_ = flops_per_batch_ > 0 || !options_.measure_flops();
  peak_flops_ = options_.peak_flops();
  if (peak_flops_ > 0 || (options_.flops_per_batch() == 0 && !options_.measure_flops())) return;
  // Every rank measures at once (ranks that share a machine share its cores), then their mean.
  Strategy& strategy = trainer.strategy();
  const double mine = measure_matmul_flops(strategy.root_device(), matmul_dtype(trainer.options().precision()));
  peak_flops_ = strategy.world_size() == 1
                    ? mine
                    : strategy
                          .reduce(torch::tensor({mine}, torch::dtype(torch::kDouble).device(strategy.root_device())),
                                  ReduceOp::kMean)
                          .item<double>();
}

void ThroughputMonitor::on_train_start(Trainer& /*trainer*/, LightningModule& /*module*/) {
  throughput_.reset();
  counts_ = {};
  paused_.reset();
  paused_seconds_ = 0;
  start_ = std::chrono::steady_clock::now();
}

double ThroughputMonitor::seconds(Trainer& trainer) const {
  if (trainer.strategy().root_device().is_cuda()) torch::cuda::synchronize(trainer.strategy().root_device().index());
  const auto now = paused_.value_or(std::chrono::steady_clock::now());
  return std::chrono::duration<double>(now - start_).count() - paused_seconds_;
}

void ThroughputMonitor::on_train_batch_start(Trainer& /*trainer*/, LightningModule& /*module*/, const Batch& /*batch*/,
                                             int64_t /*batch_idx*/) {
  if (flops_measured_ || flop_counter_.running()) return;
  if (!FlopCounter::available()) {
    rank_zero_warn("ThroughputMonitor: measure_flops needs LibTorch's profiler, which another profiler holds ",
                   "(profiler: pytorch); no FLOPs are counted, give flops_per_batch instead");
    flops_measured_ = true;
    return;
  }
  flop_counter_.start();
}

void ThroughputMonitor::on_after_backward(Trainer& /*trainer*/, LightningModule& /*module*/) {
  if (!flop_counter_.running()) return;
  flops_per_batch_ = flop_counter_.stop();
  flops_measured_ = true;
  if (flop_counter_.missed_convolution_backward()) {
    rank_zero_warn("ThroughputMonitor: measure_flops counted ", flops_per_batch_, " FLOPs a batch without the ",
                   "backward of the model's convolutions, which LibTorch's profiler does not count; give ",
                   "flops_per_batch for a convolutional model (about 3 times its forward FLOPs)");
  }
}

void ThroughputMonitor::on_train_batch_end(Trainer& trainer, LightningModule& module, const torch::Tensor& /*loss*/,
                                           const Batch& batch, int64_t /*batch_idx*/) {
  on_after_backward(trainer, module);  // manual optimization: the counter runs to here
  counts_.batches += 1;
  counts_.samples += static_cast<double>(options_.batch_size_fn() ? options_.batch_size_fn()(batch) : batch.size());
  if (options_.length_fn()) {
    counts_.lengths += static_cast<double>(options_.length_fn()(batch));
  } else if (options_.length() == "data") {
    counts_.lengths += static_cast<double>(batch.data.numel());
  }
  counts_.flops += flops_per_batch_;
}

void ThroughputMonitor::on_after_optimizer_step(Trainer& trainer, LightningModule& /*module*/) {
  ThroughputRecord record = counts_;
  record.time = seconds(trainer);
  throughput_.update(record);
  if (trainer.global_step() % trainer.options().log_every_n_steps() != 0) return;
  last_ = compute(trainer);
  if (trainer.logger() != nullptr && trainer.is_global_zero()) {
    trainer.logger()->log_metrics(last_, trainer.global_step());
  }
}

std::map<std::string, double> ThroughputMonitor::compute(Trainer& trainer) {
  const bool with_lengths = options_.length_fn() != nullptr || !options_.length().empty();
  const bool with_flops = flops_per_batch_ > 0;
  const ThroughputRecord totals = throughput_.totals();
  std::map<std::string, double> out{
      {"train/time", totals.time}, {"train/batches", totals.batches}, {"train/samples", totals.samples}};
  if (with_lengths) out["train/lengths"] = totals.lengths;
  // Every rank holds a window at the same steps: one record per optimizer step.
  const std::optional<ThroughputRecord> window = throughput_.window();
  if (!window) return out;
  out.merge(throughput_rates(*window, "train/device/", with_lengths, with_flops, peak_flops_));
  Strategy& strategy = trainer.strategy();
  const int64_t world = strategy.world_size();
  if (world == 1) return out;
  const auto mine = torch::tensor({window->time, window->batches, window->samples, window->lengths, window->flops},
                                  torch::dtype(torch::kDouble).device(strategy.root_device()));
  const torch::Tensor all = strategy.all_gather(mine).to(torch::kCPU);  // [world, 5]
  const auto row = [&](int64_t r) {
    const auto v = all[r];
    return ThroughputRecord{v[0].item<double>(), v[1].item<double>(), v[2].item<double>(), v[3].item<double>(),
                            v[4].item<double>()};
  };
  ThroughputRecord sum;
  for (int64_t r = 0; r < world; ++r) {
    const ThroughputRecord w = row(r);
    sum.time += w.time / static_cast<double>(world);  // the window's mean time
    sum.batches += w.batches;
    sum.samples += w.samples;
    sum.lengths += w.lengths;
    sum.flops += w.flops;
    if (options_.log_per_rank()) {
      const std::string prefix = c10::str("train/rank", r, "/");
      for (const auto& [key, value] : throughput_rates(w, prefix, false, false, 0)) out[key] = value;
    }
  }
  out.merge(throughput_rates(sum, "train/", with_lengths, with_flops, peak_flops_ * static_cast<double>(world)));
  return out;
}

void ThroughputMonitor::on_validation_start(Trainer& /*trainer*/, LightningModule& /*module*/) {
  if (!paused_) paused_ = std::chrono::steady_clock::now();
}

void ThroughputMonitor::on_validation_end(Trainer& /*trainer*/, LightningModule& /*module*/) {
  if (!paused_) return;
  paused_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - *paused_).count();
  paused_.reset();
}

}  // namespace lt
