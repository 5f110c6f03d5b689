#include <lightning_cpp/loops/training_epoch_loop.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include <optional>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/plugins/join/epoch_driver.h>

namespace lt {

TrainingEpochLoop::TrainingEpochLoop()
    : automatic_(std::make_shared<AutomaticOptimization>()),
      manual_(std::make_shared<ManualOptimization>()),
      val_loop_(std::make_shared<EvaluationLoop>()) {}

namespace {

// What must hold for every batch of an epoch, so that a bad batch fails
// here, naming both, not deep in forward: the first batch's keys, and for
// each its dtype and rank. Sizes may differ (bucketed sequences, a last short batch).
void check_like_first(const Batch& first, const Batch& batch, const LoopContext& ctx, int64_t batch_idx) {
  const auto a = first.tensors(), b = batch.tensors();
  const bool same = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](const auto& x, const auto& y) {
                      return x.first == y.first && x.second.scalar_type() == y.second.scalar_type() &&
                             x.second.dim() == y.second.dim();
                    });
  LT_CHECK(same, "bad batch at epoch ", ctx.state.current_epoch, ", batch ", batch_idx, " (global step ",
           ctx.state.global_step, ", rank ", ctx.strategy.global_rank(), "): ", batch.describe(),
           "; the epoch's first batch had ", first.describe(), " (every batch must have the same keys, dtypes and ",
           "numbers of dimensions)");
}

}  // namespace

int64_t TrainingEpochLoop::val_check_batch(const TrainerOptions& options, int64_t n) {
  const FractionOrCount& interval = options.val_check_interval();
  if (interval.is_count()) return std::max<int64_t>(1, interval.count());
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(static_cast<double>(n) * interval.fraction())));
}

void TrainingEpochLoop::run_validation(LoopContext& ctx, DataLoader& val) {
  const int64_t limit = val.limited_size(ctx.options.limit_val_batches(), "limit_val_batches");
  if (limit <= 0 || !ctx.module.has_validation_step()) return;
  val_loop_->run(ctx, val, Stage::kValidate, limit);
  ++ctx.state.validations_run;
}

// One epoch's run of the loop: its state between iterations, and what the
// epoch driver's context calls back (EpochSteps) for a rank that joined.
class TrainingEpoch : public EpochSteps {
 public:
  TrainingEpoch(TrainingEpochLoop& loop, LoopContext& ctx, OptimizationLoop& optimization, ResultCollection& results,
                DataLoader* val, bool unknown_length)
      : loop_(loop), ctx_(ctx), optimization_(optimization), results_(results), val_(val),
        unknown_length_(unknown_length), last_step_(ctx.state.global_step) {}

  // The epoch starts at iteration `first` (a resumed one's may be its end);
  // `length` as every rank counts it (validation points count its iterations).
  void start(int64_t first, int64_t length) {
    last_iteration_ = first - 1;
    length_ = length;
    val_every_ = TrainingEpochLoop::val_check_batch(ctx_.options, length);
  }
  int64_t last_iteration() const { return last_iteration_; }

  bool steps_without_batch() const override { return optimization_.steps_without_batch(); }
  void optimizer_step() override { optimization_.optimizer_step(ctx_); }
  // A rank that joined logs what the ranks still training logged (the logging
  // joinable recorded their reduced values), as an even run would; windows
  // are aligned on multiples of k under Join.
  void joined_iteration_end(int64_t iteration) override {
    const bool window_end = (iteration + 1) % ctx_.options.accumulate_grad_batches() == 0;
    log_step(window_end && ctx_.state.global_step != last_step_);  // lockstep: it stepped with them
    iteration_end(iteration);
  }

  // The step's metrics to the logger at a window's end, every log_every_n_steps.
  void log_step(bool window_end) {
    const auto step_metrics = results_.take_step_metrics(true);
    if (window_end && ctx_.state.global_step % ctx_.options.log_every_n_steps() == 0) ctx_.log_metrics(step_metrics);
  }

  // The end of every iteration of the epoch, on every rank at the same
  // point: after its micro-batch (real or padding), or on a rank that joined,
  // after it shadowed the iteration. Validation points count iterations of
  // the whole epoch (the longest rank's).
  void iteration_end(int64_t iteration) {
    last_iteration_ = iteration;
    if (ctx_.state.global_step != last_step_) {
      last_step_ = ctx_.state.global_step;
      ctx_.hooks.call(&Callback::on_after_optimizer_step);
    }
    if (val_ != nullptr && !unknown_length_ && (iteration + 1) % val_every_ == 0 && iteration + 1 < length_) {
      loop_.run_validation(ctx_, *val_);
    }
  }

 private:
  TrainingEpochLoop& loop_;
  LoopContext& ctx_;
  OptimizationLoop& optimization_;
  ResultCollection& results_;
  DataLoader* val_;  // null: no validation this epoch
  bool unknown_length_;
  int64_t length_ = 0;
  int64_t val_every_ = 1;
  int64_t last_iteration_ = -1;
  int64_t last_step_;
};

void TrainingEpochLoop::run(LoopContext& ctx, DataLoader& train, DataLoader* val) {
  const FractionOrCount& limit = ctx.options.limit_train_batches();
  const bool unknown_length = train.size() == DataLoader::kUnknownSize;
  // A stream of unknown length: its length is found at its end (or at a count limit, `cap`).
  const int64_t cap = train.limited_size(limit, "limit_train_batches");
  const bool validate_this_epoch =
      val != nullptr && (ctx.state.current_epoch + 1) % ctx.options.check_val_every_n_epoch() == 0;
  if (unknown_length) {
    const FractionOrCount& interval = ctx.options.val_check_interval();
    LT_CHECK_VALUE(val == nullptr || (!interval.is_count() && interval.fraction() == 1.0), "val_check_interval: ",
                   "validation within the epoch needs the epoch's length, and the training data is a stream of ",
                   "unknown length; validate at epoch ends (val_check_interval: 1.0, check_val_every_n_epoch), or ",
                   "give the stream's length (IterableDataset::length)");
  }
  OptimizationLoop& optimization = ctx.module.automatic_optimization() ? *automatic_ : *manual_;
  ResultCollection& results = ctx.use_results(Stage::kTrain, true);
  TrainingEpoch epoch(*this, ctx, optimization, results, validate_this_epoch ? val : nullptr, unknown_length);

  EpochPlan plan;
  plan.num_batches = unknown_length ? -1 : cap;
  plan.accumulate_grad_batches = ctx.options.accumulate_grad_batches();
  plan.max_steps = ctx.options.max_steps();
  plan.state = &ctx.state;
  plan.results = &results;
  plan.steps = &epoch;
  // Starts where a resumed run's mid-epoch checkpoint left the epoch.
  EpochDriver driver(ctx.strategy, ctx.module, train, plan, cap);
  const int64_t length = driver.epoch_length();
  epoch.start(ctx.state.epoch_iteration, length);
  std::optional<Batch> first;
  while (const std::optional<MicroBatch> micro = driver.next()) {
    const int64_t it = micro->index;
    if (micro->padding) {
      driver.run_padding(*micro);
      driver.end_batch();
    } else {
      ctx.state.batch_idx = it;
      Batch batch;
      {
        ProfileScope scope(ctx.profiler, "[_TrainingEpochLoop].train_dataloader_next");
        batch = train.get(it);
      }
      if (first) {
        check_like_first(*first, batch, ctx, it);
      } else {
        first = batch;
      }
      batch = ctx.strategy.prepare_batch(std::move(batch));
      results.set_current_batch_size(batch.size());
      // A rank that ran out of data (Join) runs the optimizer step with the
      // others (lockstep), but none of these hooks.
      torch::Tensor loss;
      {
        UnmatchedHooks unmatched(ctx.state, "on_train_batch_start, training_step or the backward hooks");
        ctx.hooks.call(&Callback::on_train_batch_start, batch, it);
        ctx.module.on_train_batch_start(batch, it);
        loss = optimization.run(ctx, batch, it, micro->ends_window);
      }
      driver.end_batch();
      {
        UnmatchedHooks unmatched(ctx.state, "on_train_batch_end");
        ctx.hooks.call(&Callback::on_train_batch_end, loss, batch, it);
        ctx.module.on_train_batch_end(loss, batch, it);
      }
    }
    // A padding micro-batch logs what the ranks with data logged (join/joinable_logging.h).
    epoch.log_step(micro->ends_window);
    epoch.iteration_end(it);
    // Under a strategy that pads, stopping early leaves this rank's
    // remaining iterations to finish() (Join shadows them).
    if (driver.stops_after(*micro)) break;
  }
  {
    // A rank that ran out of data shadows the others' iterations here (Join).
    ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".join");
    driver.finish();
  }
  // Lightning's order: once the epoch's batches are all done, an
  // epoch-interval scheduler that follows no metric steps, before the epoch's
  // validation and end hooks (one that follows a metric steps after them,
  // where the metric is logged: FitLoop).
  const bool epoch_done = unknown_length ? !driver.stopped() : epoch.last_iteration() + 1 == length;
  if (epoch_done && ctx.state.interrupted_by == 0 && ctx.optim->lr_scheduler != nullptr &&
      !ctx.optim->lr_scheduler->monitors_metric()) {
    step_scheduler(*ctx.optim, Interval::kEpoch, ctx.state.current_epoch + 1, ctx.state.callback_metrics);
  }
  // The epoch's last iteration, run here or shadowed, is a validation point:
  // validate after every rank left the epoch context.
  // A stream of unknown length validates at its epoch's end only (refused otherwise, above).
  const bool validate_at_end =
      validate_this_epoch && (unknown_length ? !driver.stopped()
                                             : epoch.last_iteration() + 1 == length && length % val_check_batch(ctx.options, length) == 0);
  if (validate_at_end && ctx.state.interrupted_by == 0) run_validation(ctx, *val);
}

}  // namespace lt
