#include <lightning_cpp/loops/fit_loop.h>

#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/signals.h>

namespace lt {

bool FitLoop::done(const LoopContext& ctx) const {
  const int64_t max_epochs = ctx.options.resolved_max_epochs();
  if (max_epochs >= 0 && ctx.state.current_epoch >= max_epochs) return true;
  if (ctx.options.max_steps() >= 0 && ctx.state.global_step >= ctx.options.max_steps()) return true;
  return ctx.state.should_stop;
}

void FitLoop::sanity_check(LoopContext& ctx, DataLoader* val) {
  if (val == nullptr || ctx.options.num_sanity_val_steps() == 0 || !ctx.module.has_validation_step()) return;
  const int64_t limit = val->limited_size(ctx.options.limit_val_batches(), "limit_val_batches");
  if (limit <= 0) return;
  const int64_t steps = ctx.options.num_sanity_val_steps() < 0 ? limit
                                                                : std::min(limit, ctx.options.num_sanity_val_steps());
  ctx.hooks.call(&Callback::on_sanity_check_start);
  epoch_loop_->val_loop().run(ctx, *val, Stage::kSanityCheck, steps);
  ctx.hooks.call(&Callback::on_sanity_check_end);
}

void FitLoop::run(LoopContext& ctx, DataLoader& train, DataLoader* val) {
  ctx.state.stage = Stage::kTrain;
  sanity_check(ctx, val);
  ctx.state.validations_run = 0;
  ctx.state.callback_metrics.clear();
  ctx.state.progress_bar_metrics.clear();
  ctx.hooks.call(&Callback::on_train_start);
  ctx.module.on_train_start();
  while (!done(ctx)) {
    ctx.state.stage = Stage::kTrain;
    ctx.state.epoch_ended = false;
    ctx.module.train();
    train.set_epoch(ctx.state.current_epoch);
    if (val != nullptr) val->set_epoch(ctx.state.current_epoch);
    ctx.hooks.call(&Callback::on_train_epoch_start);
    ctx.module.on_train_epoch_start();
    {
      ProfileScope scope(ctx.profiler, "run_training_epoch");
      epoch_loop_->run(ctx, train, val);
    }
    if (ctx.state.interrupted_by != 0) {
      throw Interrupted(c10::str("training interrupted by signal ", ctx.state.interrupted_by, " at epoch ",
                                 ctx.state.current_epoch, ", global step ", ctx.state.global_step),
                        ctx.state.interrupted_by);
    }

    ctx.state.stage = Stage::kTrain;
    ctx.state.epoch_ended = true;
    ResultCollection& results = ctx.use_results(Stage::kTrain, false);
    ctx.module.on_train_epoch_end();
    ctx.log_metrics(results.take_epoch_metrics(true));
    ctx.hooks.call(&Callback::on_train_epoch_end);
    // A scheduler that follows a metric steps here, after the hooks that log
    // it (the others stepped after the epoch's last batch: TrainingEpochLoop).
    if (ctx.optim->lr_scheduler != nullptr && ctx.optim->lr_scheduler->monitors_metric()) {
      step_scheduler(*ctx.optim, Interval::kEpoch, ctx.state.current_epoch + 1, ctx.state.callback_metrics);
    }
    ++ctx.state.current_epoch;
    ctx.state.epoch_ended = false;
  }
  ctx.hooks.call(&Callback::on_train_end);
  ctx.module.on_train_end();
  if (ctx.state.skipped_steps > 0) {
    rank_zero_warn("on_nonfinite: skip_step: ", ctx.state.skipped_steps, " of ", ctx.state.global_step,
                   " optimizer steps were skipped for non-finite gradients",
                   ctx.state.skipped_steps == ctx.state.global_step ? " (every one: the run diverged)" : "");
  }
}

}  // namespace lt
