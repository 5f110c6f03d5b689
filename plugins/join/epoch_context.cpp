#include <lightning_cpp/plugins/join/epoch_context.h>

#include <optional>

#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/plugins/distributed/collective_watchdog.h>
#include <lightning_cpp/plugins/join/join.h>
#include <lightning_cpp/plugins/join/joinable_logging.h>

namespace lt {

namespace {

CollectiveWatchdog::Scope watch(CollectiveWatchdog* watchdog, const char* collective) {
  return CollectiveWatchdog::Scope(watchdog, collective);
}

// Whether every rank stops at this boundary (see TrainingEpochContext::stop_requested).
// In lockstep, what the window's gradient reduction carried decides, where the
// gradient sync carries one (GradientSync::take_agreed_stop).
bool agree_stop(CollectiveWatchdog* watchdog, GradientSync& sync_, bool local, const RunState& state, bool lockstep,
                bool sync) {
  const std::optional<bool> reduced = lockstep ? sync_.take_agreed_stop() : std::nullopt;
  if (watchdog == nullptr) return local;
  return watchdog->agree_stop(local, state.global_step, lockstep, sync, reduced);
}

// Every rank runs this epoch's batches with the others' collectives, or
// throws naming the counts (collectives: one allreduce; an allgather when they differ).
void check_even_batches(Strategy& strategy, int64_t num_batches, const char* what, const char* fix) {
  const std::string per_rank = uneven_counts(strategy, num_batches);
  if (per_rank.empty()) return;
  throw Error(c10::str(what, ": the ranks have different numbers of training batches this epoch (", per_rank,
                       "), so the ranks with more batches would wait forever in the gradient reduction for the ",
                       "ranks that ran out. ", fix));
}

// no_sync on accumulation micro-batches (nothing on a window's last).
class NoSyncBatchGuard : public BatchGuard {
 public:
  NoSyncBatchGuard(GradientSync& sync, bool sync_gradients) {
    if (!sync_gradients) no_sync_.emplace(sync.no_sync());
  }

 private:
  std::optional<GradientSync::NoSyncGuard> no_sync_;
};

class NoSyncEpochContext : public TrainingEpochContext {
 public:
  // pad and error even out the loaders before training; what still differs
  // (limit_train_batches per rank, a sampler whose count changes by epoch) is
  // refused here.
  NoSyncEpochContext(EpochPlan plan, EpochParts parts) : TrainingEpochContext(plan), parts_(parts) {
    check_even_batches(parts_.strategy, plan.num_batches, "uneven inputs without Join (uneven_inputs: pad or error)",
                       "Use uneven_inputs: join, or give every rank as many batches");
    parts_.sync.reset_agreed_stop();
  }
  std::unique_ptr<BatchGuard> batch(int64_t /*iteration*/, bool sync_gradients) override {
    if (sync_gradients) return nullptr;
    return std::make_unique<NoSyncBatchGuard>(parts_.sync, sync_gradients);
  }
  // The ranks run in lockstep: the gradient allreduce tells them all whether to stop.
  bool stop_requested(bool local) override {
    return agree_stop(parts_.watchdog, parts_.sync, local, *plan().state, /*lockstep=*/true, /*sync=*/true);
  }
  void finish() override {
    auto scope = watch(parts_.watchdog, "the gradient sync's epoch end");
    parts_.sync.end_epoch();
  }

 private:
  EpochParts parts_;
};

// Runs the loop's iteration end on a joined rank (EpochSteps::joined_iteration_end),
// after the gradient sync's and the logging joinable's main hooks: whatever the ranks still
// training do after an iteration's micro-batch (step-end hooks, validation),
// a joined rank does at the same point with them.
class LoopJoinable : public Joinable {
 public:
  LoopJoinable(std::function<void(int64_t)> iteration_end, const int64_t& next_iteration, const Joinable& sync,
               CollectiveWatchdog* watchdog)
      : iteration_end_(std::move(iteration_end)), next_iteration_(next_iteration), sync_(sync), watchdog_(watchdog) {}

  std::unique_ptr<JoinHook> join_hook() override { return std::make_unique<Hook>(*this); }
  int64_t shadowed() const { return shadowed_; }
  torch::Device join_device() const override { return sync_.join_device(); }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return sync_.join_process_group(); }

 private:
  class Hook : public JoinHook {
   public:
    explicit Hook(LoopJoinable& owner) : owner_(owner) {}
    void main_hook() override {
      auto scope = watch(owner_.watchdog_, "a joined rank's iteration end (step hooks, validation)");
      // The active ranks' micro-batch index this main hook shadows.
      owner_.iteration_end_(owner_.next_iteration_ + owner_.shadowed_++);
    }

   private:
    LoopJoinable& owner_;
  };

  std::function<void(int64_t)> iteration_end_;
  const int64_t& next_iteration_;
  const Joinable& sync_;
  CollectiveWatchdog* watchdog_;
  int64_t shadowed_ = 0;
};

class JoinEpochContext : public TrainingEpochContext {
 public:
  JoinEpochContext(EpochPlan plan, EpochParts parts, LightningModule& module, JoinSettings settings)
      : TrainingEpochContext(plan),
        strategy_(parts.strategy),
        watchdog_(parts.watchdog),
        module_(module),
        sync_(parts.sync),
        settings_(settings) {
    if (!settings_.enable) {
      check_even_batches(strategy_, plan.num_batches,
                         "uneven inputs with Join disabled (join_enable: false)",
                         "Set join_enable: true, or uneven_inputs: pad");
    }
    sync_.reset_agreed_stop();
    GradientSync::Epoch epoch;
    epoch.divide_by_initial_world_size = settings_.divide_by_initial_world_size;
    // Lockstep: a joined rank takes the loop's step with the others, where it can without a batch.
    const bool lockstep = settings_.mode == JoinMode::kLockstep && plan.steps->steps_without_batch();
    if (lockstep) epoch.lockstep = plan.steps;
    JoinSchedule schedule;
    if (settings_.enable && strategy_.world_size() > 1) {
      auto scope = watch(watchdog_, "allreduce of the ranks' batch counts (Join epoch start)");
      // A stream of unknown length (-1) on any rank: the epoch's length is unknown.
      const auto [shortest, most] = count_range(strategy_, plan.num_batches);
      length_ = shortest < 0 ? -1 : most;
      // Every count known, lockstep with the loop's step, gradients divided by
      // the world size: the schedule says all the heartbeat would (join.h).
      if (shortest >= 0 && lockstep && settings_.divide_by_initial_world_size) {
        scheduled_ = true;
        all_active_below_ = shortest;
        first_out_ = join_num_iterations(shortest, plan.accumulate_grad_batches, true);
        const int64_t longest = join_num_iterations(length_, plan.accumulate_grad_batches, true);
        schedule = [this, longest] { return !stopped_ && shadowed_iteration() < longest; };
        epoch.scheduled_reduces = [this] { return window_end(shadowed_iteration()); };
      }
    }
    sync_.set_epoch(std::move(epoch));
    // The gradient sync first (its before_forward sends the heartbeat), then
    // the strategy's other joinables, then logging and the loop, in the order
    // an active rank's iteration runs their collectives.
    std::vector<Joinable*> joinables{&sync_};
    joinables.insert(joinables.end(), parts.joinables.begin(), parts.joinables.end());
    // With Join disabled sync_dist values are reduced as they are logged (every rank runs every micro-batch).
    if (plan.results != nullptr && settings_.enable) {
      logging_ = std::make_unique<LoggingJoinable>(*plan.results, sync_.join_process_group(), sync_.join_device());
      joinables.push_back(logging_.get());
    }
    // Scheduled, a joined rank stops shadowing where the others stop.
    auto shadowed_end = [this](int64_t iteration) {
      this->plan().state->epoch_iteration = iteration + 1;  // a checkpoint after an agreed stop resumes here
      this->plan().steps->joined_iteration_end(iteration);
      if (scheduled_) stopped_ = stops_after(window_end(iteration));
    };
    loop_ = std::make_unique<LoopJoinable>(std::move(shadowed_end), next_iteration_, sync_, watchdog_);
    joinables.push_back(loop_.get());
    join_ = std::make_unique<Join>(joinables, settings_.enable, settings_.throw_on_early_termination, schedule);
  }

  ~JoinEpochContext() override {
    join_.reset();  // resets the joinables' configs before the joinables go
    loop_.reset();
    logging_.reset();
    sync_.set_epoch({});
  }

  int64_t num_iterations() const override {
    return join_num_iterations(plan().num_batches, plan().accumulate_grad_batches, settings_.enable);
  }

  int64_t epoch_length() const override { return length_; }
  bool window_end(int64_t iteration) const {
    return (iteration + 1) % std::max<int64_t>(1, plan().accumulate_grad_batches) == 0;
  }
  // The iteration a joined rank shadows next (or now, inside its main hooks).
  int64_t shadowed_iteration() const { return next_iteration_ + loop_->shadowed(); }
  // An iteration past this rank's data (its count is unknown (-1) until a stream ends).
  bool padding(int64_t iteration) const { return plan().num_batches >= 0 && iteration >= plan().num_batches; }

  std::unique_ptr<BatchGuard> batch(int64_t iteration, bool sync_gradients) override {
    // Scheduled: where the heartbeat would tell that a rank ran out.
    if (settings_.throw_on_early_termination && first_out_ >= 0 && iteration >= first_out_) {
      throw EarlyTerminationError("Detected at least one rank that exhausted inputs. Throwing across all ranks.");
    }
    next_iteration_ = iteration + 1;
    auto guard = std::make_unique<NoSyncBatchGuard>(sync_, sync_gradients);
    if (logging_) logging_->open();
    if (padding(iteration)) {
      // A padding micro-batch has no training_step: run the gradient sync's
      // forward sequence here so that its collectives match the other ranks'.
      auto scope = watch(watchdog_, "forward collectives (Join heartbeat, padding micro-batch)");
      sync_.before_forward();
      sync_.shadow_forward();  // the forward (and backward) the others run: collective layers
      sync_.after_forward({zero_loss(module_, sync_.join_device())});  // run_padding's
    }
    return guard;
  }

  void end_batch(int64_t iteration) override {
    if (!logging_) return;
    auto scope = watch(watchdog_, "sync_dist logging allreduce (Join)");
    logging_->flush(padding(iteration), /*all_active=*/iteration < all_active_below_);
  }

  // A rank may leave at once (Join shadows it); the others learn of the stop
  // from the watchdog thread, and from the store itself after finish().
  // Scheduled, the ranks agree on the step to stop at, as without Join.
  bool stop_requested(bool local) override {
    return agree_stop(watchdog_, sync_, local, *plan().state,
                      /*lockstep=*/!settings_.enable || scheduled_, /*sync=*/finished_ || !settings_.enable || scheduled_);
  }

  void finish() override {
    finished_ = true;
    // Scheduled: a rank that stopped after its last iteration (max_steps, an
    // agreed stop) shadows nothing, since the others stop there too.
    if (scheduled_ && next_iteration_ > plan().first_iteration) {
      stopped_ = stops_after(window_end(next_iteration_ - 1));
    }
    {
      auto scope = watch(watchdog_, kJoinShadowingScope);
      join_->join();
    }
    {
      auto scope = watch(watchdog_, "the gradient sync's epoch end");
      sync_.end_epoch();
    }
    if (!settings_.enable) return;
    // In lockstep every rank took every step.
    if (settings_.mode == JoinMode::kLockstep && plan().steps->steps_without_batch()) return;
    // Ranks that joined early took fewer optimizer steps; they now hold the
    // last joiner's model, so they take its step count too.
    RunState& state = *plan().state;
    torch::Tensor steps = torch::tensor({state.global_step}, torch::kLong);
    state.global_step = strategy_.reduce(steps, ReduceOp::kMax).item<int64_t>();
  }

 private:

  Strategy& strategy_;
  CollectiveWatchdog* watchdog_;
  LightningModule& module_;
  GradientSync& sync_;
  JoinSettings settings_;
  std::unique_ptr<LoggingJoinable> logging_;
  std::unique_ptr<LoopJoinable> loop_;
  std::unique_ptr<Join> join_;
  int64_t length_ = plan().num_batches;  // the longest rank's num_batches
  int64_t next_iteration_ = plan().first_iteration;  // the iteration this rank runs, or shadows, next
  bool finished_ = false;
  // Scheduled Join (join.h): iterations below all_active_below_ run on every
  // rank; first_out_: the first iteration some rank has none of; stopped_:
  // the ranks stopped (max_steps, should_stop, an agreed stop).
  bool scheduled_ = false;
  int64_t all_active_below_ = 0;
  int64_t first_out_ = -1;
  bool stopped_ = false;
};

}  // namespace

int64_t join_num_iterations(int64_t num_batches, int64_t accumulate_grad_batches, bool join_enabled) {
  if (!join_enabled) return num_batches;
  const int64_t k = std::max<int64_t>(1, accumulate_grad_batches);
  return (num_batches + k - 1) / k * k;
}

std::unique_ptr<TrainingEpochContext> make_no_sync_epoch_context(EpochParts parts, const EpochPlan& plan) {
  return std::make_unique<NoSyncEpochContext>(plan, parts);
}

std::unique_ptr<TrainingEpochContext> make_join_epoch_context(EpochParts parts, LightningModule& module,
                                                              const EpochPlan& plan, const JoinSettings& settings) {
  return std::make_unique<JoinEpochContext>(plan, std::move(parts), module, settings);
}

}  // namespace lt
