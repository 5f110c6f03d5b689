#include <lightning_cpp/callbacks/registration.h>

#include <lightning_cpp/callbacks/device_stats_monitor.h>
#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>
#include <lightning_cpp/callbacks/lr_monitor.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/model_summary.h>
#include <lightning_cpp/callbacks/progress_bar.h>
#include <lightning_cpp/callbacks/throughput_monitor.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/registry.h>

namespace lt {

void register_builtin_callbacks(Registry& r) {
  // Each callback's init args are its Options struct's rows (callbacks/*_options.def), in their order.
  r.add<Callback>(
      "EarlyStopping", "stop fit when a monitored metric stops improving",
      [] {
        ArgSchema schema;
        const EarlyStoppingOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/callbacks/early_stopping_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        EarlyStoppingOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/callbacks/early_stopping_options.def>
#undef LT_OPTION
        return std::make_shared<EarlyStopping>(options);
      });
  r.add<Callback>(
      "ModelCheckpoint", "save the top-k checkpoints by a metric, or the latest",
      [] {
        ArgSchema schema;
        const ModelCheckpointOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/callbacks/model_checkpoint_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        ModelCheckpointOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/callbacks/model_checkpoint_options.def>
#undef LT_OPTION
        return std::make_shared<ModelCheckpoint>(options);
      });
  r.add<Callback>(
      "LearningRateMonitor", "log the optimizer's learning rates",
      [] {
        ArgSchema schema;
        const LearningRateMonitorOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/callbacks/lr_monitor_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        LearningRateMonitorOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/callbacks/lr_monitor_options.def>
#undef LT_OPTION
        return std::make_shared<LearningRateMonitor>(options);
      });
  r.add<Callback>(
      "ProgressBar", "epoch progress on rank 0 (a bar on a terminal, plain lines otherwise)",
      [] {
        ArgSchema schema;
        const ProgressBarOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/callbacks/progress_bar_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        ProgressBarOptions options;
#define LT_OPTION LT_OPTION_READ
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/callbacks/progress_bar_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
        return std::make_shared<ProgressBar>(options);
      });
  r.add<Callback>("GradientAccumulationScheduler", "accumulate_grad_batches by epoch: {epoch: factor}",
                  ArgSchema().add_required("scheduling", ArgType::kIntMap, "{epoch: accumulate_grad_batches}"),
                  [](const InitArgs& a) {
                    return std::make_shared<GradientAccumulationScheduler>(a.get_int_map("scheduling"));
                  });
  r.add<Callback>(
      "ModelSummary", "the model's layers and parameter counts, printed at the start of fit",
      [] {
        ArgSchema schema;
        const ModelSummaryOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/callbacks/model_summary_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        ModelSummaryOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/callbacks/model_summary_options.def>
#undef LT_OPTION
        return std::make_shared<ModelSummary>(options);
      });
  r.add<Callback>(
      "Timer", "stop fit after a maximum duration",
      [] {
        ArgSchema schema;
        const TimerOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#define LT_OPTION_WITH LT_OPTION_WITH_SCHEMA
#include <lightning_cpp/callbacks/timer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
        return schema;
      }(),
      [](const InitArgs& args) {
        TimerOptions options;
#define LT_OPTION LT_OPTION_READ
#define LT_OPTION_WITH LT_OPTION_WITH_READ
#include <lightning_cpp/callbacks/timer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
        return std::make_shared<Timer>(options);
      });
  r.add<Callback>(
      "ThroughputMonitor", "batches, samples, items and FLOPs per second, and MFU",
      [] {
        ArgSchema schema;
        const ThroughputMonitorOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/callbacks/throughput_monitor_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        ThroughputMonitorOptions options;
#define LT_OPTION LT_OPTION_READ
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/callbacks/throughput_monitor_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
        return std::make_shared<ThroughputMonitor>(options);
      });
  r.add<Callback>(
      "DeviceStatsMonitor", "the device's and the host's memory and load at training batches",
      [] {
        ArgSchema schema;
        const DeviceStatsMonitorOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/callbacks/device_stats_monitor_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        DeviceStatsMonitorOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/callbacks/device_stats_monitor_options.def>
#undef LT_OPTION
        return std::make_shared<DeviceStatsMonitor>(options);
      });
}

}  // namespace lt
