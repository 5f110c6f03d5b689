#include <lightning_cpp/callbacks/registration.h>

#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/callbacks/gradient_accumulation_scheduler.h>
#include <lightning_cpp/callbacks/lr_monitor.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/callbacks/model_summary.h>
#include <lightning_cpp/callbacks/progress_bar.h>
#include <lightning_cpp/callbacks/timer.h>
#include <lightning_cpp/core/registry.h>

namespace lt {

void register_builtin_callbacks(Registry& r) {
  const EarlyStoppingOptions es;
  const ModelCheckpointOptions mc;
  const LearningRateMonitorOptions lrm;
  const ProgressBarOptions pb;
  const ModelSummaryOptions summary;
  const TimerOptions timer;
  r.add<Callback>(
      "EarlyStopping", "stop fit when a monitored metric stops improving",
      ArgSchema()
          .add_string("monitor", es.monitor(), "the logged metric to watch")
          .add_float("min_delta", es.min_delta(), "smallest change that counts as an improvement")
          .add_int("patience", es.patience(), "checks without improvement before stopping")
          .add_bool("verbose", es.verbose(), "print why it stopped")
          .add_string("mode", es.mode(), "whether lower or higher is better", {"min", "max"})
          .add_bool("strict", es.strict(), "fail if the monitored metric is missing")
          .add_bool("check_finite", es.check_finite(), "stop when the metric becomes NaN or infinite")
          .add_float("stopping_threshold", es.stopping_threshold(), "stop at once when the metric reaches this")
          .add_float("divergence_threshold", es.divergence_threshold(),
                     "stop at once when the metric is worse than this")
          .add_bool("check_on_train_epoch_end", es.check_on_train_epoch_end(),
                    "check at train epoch end (null: automatic)"),
      [](const InitArgs& a) {
        return std::make_shared<EarlyStopping>(EarlyStoppingOptions(a.get_string("monitor"))
                                                   .min_delta(a.get_float("min_delta"))
                                                   .patience(a.get_int("patience"))
                                                   .verbose(a.get_bool("verbose"))
                                                   .mode(a.get_string("mode"))
                                                   .strict(a.get_bool("strict"))
                                                   .check_finite(a.get_bool("check_finite"))
                                                   .stopping_threshold(a.get_optional_float("stopping_threshold"))
                                                   .divergence_threshold(a.get_optional_float("divergence_threshold"))
                                                   .check_on_train_epoch_end(
                                                       a.get_optional_bool("check_on_train_epoch_end")));
      });
  r.add<Callback>(
      "ModelCheckpoint", "save the top-k checkpoints by a metric, or the latest",
      ArgSchema()
          .add_string("dirpath", std::nullopt, "folder (null: <log_dir>/checkpoints)")
          .add_string("filename", std::nullopt, "name template, e.g. '{epoch}-{val_loss:.2f}'")
          .add_string("monitor", std::nullopt, "the logged metric to rank by (null: keep the latest)")
          .add_bool("verbose", mc.verbose(), "print each decision")
          .add_bool("save_last", mc.save_last(), "also write last.ckpt at every save")
          .add_int("save_top_k", mc.save_top_k(), "how many to keep: k, 0 none, -1 all")
          .add_string("mode", mc.mode(), "whether lower or higher is better", {"min", "max"})
          .add_bool("auto_insert_metric_name", mc.auto_insert_metric_name(),
                    "'{epoch}' gives 'epoch=3' rather than '3'")
          .add_int("every_n_train_steps", mc.every_n_train_steps(), "save every n optimizer steps (0: off)")
          .add_int("every_n_epochs", mc.every_n_epochs(),
                   "save every n epochs (null: 1, or 0 with every_n_train_steps)"),
      [](const InitArgs& a) {
        return std::make_shared<ModelCheckpoint>(ModelCheckpointOptions()
                                                     .dirpath(a.get_optional_string("dirpath").value_or(""))
                                                     .filename(a.get_optional_string("filename").value_or(""))
                                                     .monitor(a.get_optional_string("monitor").value_or(""))
                                                     .verbose(a.get_bool("verbose"))
                                                     .save_last(a.get_bool("save_last"))
                                                     .save_top_k(a.get_int("save_top_k"))
                                                     .mode(a.get_string("mode"))
                                                     .auto_insert_metric_name(a.get_bool("auto_insert_metric_name"))
                                                     .every_n_train_steps(a.get_int("every_n_train_steps"))
                                                     .every_n_epochs(a.get_optional_int("every_n_epochs")));
      });
  r.add<Callback>("LearningRateMonitor", "log the optimizer's learning rates",
                  ArgSchema()
                      .add_string("logging_interval", std::nullopt, "step, epoch, or null (follow the scheduler)",
                                  {"step", "epoch"})
                      .add_bool("log_momentum", lrm.log_momentum(), "also log momentum (SGD) or beta1 (Adam)"),
                  [](const InitArgs& a) {
                    return std::make_shared<LearningRateMonitor>(
                        LearningRateMonitorOptions()
                            .logging_interval(a.get_optional_string("logging_interval").value_or(""))
                            .log_momentum(a.get_bool("log_momentum")));
                  });
  r.add<Callback>("ProgressBar", "epoch progress on rank 0 (a bar on a terminal, plain lines otherwise)",
                  ArgSchema().add_int("refresh_rate", pb.refresh_rate(), "redraw every n batches"),
                  [](const InitArgs& a) {
                    return std::make_shared<ProgressBar>(ProgressBarOptions().refresh_rate(a.get_int("refresh_rate")));
                  });
  r.add<Callback>("GradientAccumulationScheduler", "accumulate_grad_batches by epoch: {epoch: factor}",
                  ArgSchema().add_required("scheduling", ArgType::kIntMap, "{epoch: accumulate_grad_batches}"),
                  [](const InitArgs& a) {
                    return std::make_shared<GradientAccumulationScheduler>(a.get_int_map("scheduling"));
                  });
  r.add<Callback>("ModelSummary", "the model's layers and parameter counts, printed at the start of fit",
                  ArgSchema().add_int("max_depth", summary.max_depth(), "layers nested this deep (-1: all, 0: none)"),
                  [](const InitArgs& a) {
                    return std::make_shared<ModelSummary>(ModelSummaryOptions().max_depth(a.get_int("max_depth")));
                  });
  r.add<Callback>("Timer", "stop fit after a maximum duration",
                  ArgSchema()
                      .add_string("duration", std::nullopt, "DD:HH:MM:SS (null: only measure)")
                      .add_string("interval", timer.interval(), "when to check", {"step", "epoch"})
                      .add_bool("verbose", timer.verbose(), "say when the time is up"),
                  [](const InitArgs& a) {
                    TimerOptions o;
                    if (auto d = a.get_optional_string("duration")) o.duration(parse_duration(*d));
                    return std::make_shared<Timer>(o.interval(a.get_string("interval")).verbose(a.get_bool("verbose")));
                  });
}

}  // namespace lt
