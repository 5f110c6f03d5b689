#include <lightning_cpp/loops/training_epoch_loop.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include <csignal>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/signals.h>

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

bool TrainingEpochLoop::max_steps_reached(const LoopContext& ctx) const {
  return ctx.options.max_steps() >= 0 && ctx.state.global_step >= ctx.options.max_steps();
}

void TrainingEpochLoop::run_validation(LoopContext& ctx, DataLoader& val) {
  const int64_t limit = val.limited_size(ctx.options.limit_val_batches(), "limit_val_batches");
  if (limit <= 0 || !ctx.module.has_validation_step()) return;
  val_loop_->run(ctx, val, Stage::kValidate, limit);
}

void TrainingEpochLoop::run(LoopContext& ctx, DataLoader& train, DataLoader* val) {
  const FractionOrCount& limit = ctx.options.limit_train_batches();
  const bool unknown_length = train.size() == DataLoader::kUnknownSize;
  // A stream of unknown length: n is found at its end (or at a count limit, `cap`).
  const int64_t cap = train.limited_size(limit, "limit_train_batches");
  int64_t n = unknown_length ? -1 : cap;
  const int64_t k = ctx.options.accumulate_grad_batches();
  ctx.state.num_training_batches = n;
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

  // A resumed run starts where its mid-epoch checkpoint left the epoch.
  const int64_t start = std::exchange(ctx.state.resume_iteration, 0);
  ctx.state.epoch_iteration = start;
  int64_t length = n;
  int64_t val_every = 1;
  int64_t last_iteration = start - 1;
  int64_t last_step = ctx.state.global_step;
  // The end of every iteration of the epoch, on every rank at the same
  // point: here after its micro-batch (real or padding), or on a rank that
  // joined, after it shadowed the iteration (EpochPlan::joined_iteration_end).
  // Validation points count iterations of the whole epoch (the longest rank's).
  auto iteration_end = [&](int64_t it) {
    last_iteration = it;
    ctx.state.epoch_iteration = it + 1;
    if (ctx.state.global_step != last_step) {
      last_step = ctx.state.global_step;
      ctx.hooks.call(&Callback::on_after_optimizer_step);
    }
    if (validate_this_epoch && !unknown_length && (it + 1) % val_every == 0 && it + 1 < length) {
      run_validation(ctx, *val);
    }
  };
  // The step's metrics to the logger at a window's end, every log_every_n_steps.
  auto log_step = [&](bool window_end) {
    const auto step_metrics = results.take_step_metrics(true);
    if (window_end && ctx.state.global_step % ctx.options.log_every_n_steps() == 0) ctx.log_metrics(step_metrics);
  };
  // A rank that joined logs what the ranks still training logged (the logging
  // joinable recorded their reduced values), as an even run would; windows
  // are aligned on multiples of k under Join.
  auto joined_iteration_end = [&](int64_t it) {
    log_step((it + 1) % k == 0 && ctx.state.global_step != last_step);  // lockstep: it stepped with them
    iteration_end(it);
  };
  std::unique_ptr<TrainingEpochContext> epoch;
  auto stops_after = [&](bool window_end) {
    return max_steps_reached(ctx) || ctx.state.should_stop ||
           (window_end && epoch->stop_requested(interrupt_signal() != 0));
  };
  epoch = ctx.strategy.training_epoch_context(
      ctx.module, EpochPlan{n, k, start, optimization.joined_step(ctx), joined_iteration_end, stops_after});
  length = epoch->epoch_length();
  ctx.state.epoch_length = length;
  val_every = val_check_batch(ctx.options, length);
  // A stream's end: no batch `it` (or the count limit): n = it. Asked one
  // batch ahead, so that the last batch is known as such (it ends the
  // accumulation window, or starts the padding to its end under Join).
  auto find_end = [&](int64_t it) {
    if (n >= 0 || (it < cap && train.has_batch(it))) return;
    n = it;
    ctx.state.num_training_batches = n;
    epoch->set_num_batches(n);
    ctx.state.epoch_length = epoch->epoch_length();
  };
  Batch first;
  bool stopped = false;
  for (int64_t it = start;; ++it) {
    find_end(it);
    if (n >= 0 && it >= epoch->num_iterations()) break;
    find_end(it + 1);
    const int64_t iterations = n >= 0 ? epoch->num_iterations() : -1;
    const bool window_end = (it + 1) % k == 0 || it + 1 == iterations;
    auto guard = epoch->batch(it, window_end);
    if (n >= 0 && it >= n) {
      optimization.run_padding(ctx, window_end);
      epoch->end_batch(it);
    } else {
      ctx.state.batch_idx = it;
      Batch batch;
      {
        ProfileScope scope(ctx.profiler, "[_TrainingEpochLoop].train_dataloader_next");
        batch = train.get(it);
      }
      if (it == start) {
        first = batch;
      } else {
        check_like_first(first, batch, ctx, it);
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
        loss = optimization.run(ctx, batch, it, window_end);
      }
      epoch->end_batch(it);
      guard.reset();
      {
        UnmatchedHooks unmatched(ctx.state, "on_train_batch_end");
        ctx.hooks.call(&Callback::on_train_batch_end, loss, batch, it);
        ctx.module.on_train_batch_end(loss, batch, it);
      }
    }
    // A padding micro-batch logs what the ranks with data logged (join/joinable_logging.h).
    log_step(window_end);
    guard.reset();
    iteration_end(it);
    // Under a strategy that pads, stopping early leaves this rank's
    // remaining iterations to the epoch context (Join shadows them).
    if (stops_after(window_end)) {
      if (!max_steps_reached(ctx) && !ctx.state.should_stop) {
        ctx.state.interrupted_by = interrupt_signal() != 0 ? interrupt_signal() : SIGTERM;
      }
      stopped = true;
      break;
    }
  }
  {
    // A rank that ran out of data shadows the others' iterations here (Join).
    ProfileScope scope(ctx.profiler, "[Strategy]", ctx.strategy.name(), ".join");
    epoch->finish();
  }
  // A stop another rank asked for reaches this one at the epoch's end at the latest.
  if (ctx.state.interrupted_by == 0 && !max_steps_reached(ctx) && !ctx.state.should_stop &&
      epoch->stop_requested(interrupt_signal() != 0)) {
    ctx.state.interrupted_by = interrupt_signal() != 0 ? interrupt_signal() : SIGTERM;
  }
  // The epoch's last iteration, run here or shadowed, is a validation point:
  // validate after every rank left the epoch context.
  // A stream of unknown length validates at its epoch's end only (refused otherwise, above).
  const bool validate_at_end =
      validate_this_epoch && (unknown_length ? !stopped : last_iteration + 1 == length && length % val_every == 0);
  if (validate_at_end && ctx.state.interrupted_by == 0) run_validation(ctx, *val);
}

}  // namespace lt
