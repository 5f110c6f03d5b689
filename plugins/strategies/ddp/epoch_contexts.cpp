#include <lightning_cpp/plugins/strategies/ddp/epoch_contexts.h>

#include <optional>

#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/plugins/join/join.h>
#include <lightning_cpp/plugins/strategies/ddp/collective_watchdog.h>
#include <lightning_cpp/plugins/strategies/ddp/distributed_data_parallel.h>
#include <lightning_cpp/plugins/strategies/ddp/joinable_logging.h>
#include <lightning_cpp/plugins/strategies/ddp/sharding.h>

namespace lt {

namespace {

CollectiveWatchdog::Scope watch(CollectiveWatchdog* watchdog, const char* collective) {
  return CollectiveWatchdog::Scope(watchdog, collective);
}

// Whether every rank stops at this boundary (see TrainingEpochContext::stop_requested).
bool agree_stop(CollectiveWatchdog* watchdog, bool local, const RunState* state, bool lockstep, bool sync) {
  if (watchdog == nullptr) return local;
  return watchdog->agree_stop(local, state != nullptr ? state->global_step : 0, lockstep, sync);
}

class NoSyncBatchGuard : public BatchGuard {
 public:
  explicit NoSyncBatchGuard(DistributedDataParallel& ddp) : guard_(ddp.no_sync()) {}

 private:
  DistributedDataParallel::NoSyncGuard guard_;
};

class NoSyncEpochContext : public TrainingEpochContext {
 public:
  NoSyncEpochContext(EpochPlan plan, DDPEpochParts parts, const RunState* state)
      : TrainingEpochContext(plan), parts_(parts), state_(state) {}
  std::unique_ptr<BatchGuard> batch(int64_t /*iteration*/, bool sync_gradients) override {
    if (sync_gradients) return nullptr;
    return std::make_unique<NoSyncBatchGuard>(parts_.ddp);
  }
  // The ranks run in lockstep: they agree through the store on the step to stop at.
  bool stop_requested(bool local) override {
    return agree_stop(parts_.watchdog, local, state_, /*lockstep=*/true, /*sync=*/true);
  }

 private:
  DDPEpochParts parts_;
  const RunState* state_;
};

class DDPJoinBatchGuard : public BatchGuard {
 public:
  DDPJoinBatchGuard(DistributedDataParallel& ddp, bool sync_gradients) {
    if (!sync_gradients) no_sync_.emplace(ddp.no_sync());
  }

 private:
  std::optional<DistributedDataParallel::NoSyncGuard> no_sync_;
};

class DDPJoinEpochContext : public TrainingEpochContext {
 public:
  DDPJoinEpochContext(EpochPlan plan, DDPEpochParts parts, LightningModule& module, JoinSettings settings)
      : TrainingEpochContext(plan),
        strategy_(parts.strategy),
        watchdog_(parts.watchdog),
        module_(module),
        ddp_(parts.ddp),
        settings_(settings) {
    if (!settings_.enable) check_even_batches();
    ddp_.set_divide_by_initial_world_size(settings_.divide_by_initial_world_size);
    if (settings_.mode == JoinMode::kLockstep) ddp_.set_join_step(plan.joined_step);
    std::vector<Joinable*> joinables{&ddp_};
    if (module_.runtime().results != nullptr) {
      logging_ = std::make_unique<LoggingJoinable>(*module_.runtime().results, ddp_.process_group(), ddp_.device());
      joinables.push_back(logging_.get());
    }
    join_ = std::make_unique<Join>(joinables, settings_.enable, settings_.throw_on_early_termination);
  }

  ~DDPJoinEpochContext() override {
    join_.reset();  // resets the joinables' configs before the logging joinable goes
    logging_.reset();
    ddp_.set_divide_by_initial_world_size(true);
    ddp_.set_join_step(nullptr);
  }

  int64_t num_iterations() const override {
    return join_num_iterations(plan().num_batches, plan().accumulate_grad_batches, settings_.enable);
  }

  std::unique_ptr<BatchGuard> batch(int64_t iteration, bool sync_gradients) override {
    auto guard = std::make_unique<DDPJoinBatchGuard>(ddp_, sync_gradients);
    if (logging_ && settings_.enable) logging_->open();
    if (iteration >= plan().num_batches) {
      // A padding micro-batch has no training_step: run DDP's forward
      // sequence here so that its collectives match the other ranks'.
      auto scope = watch(watchdog_, "DDP forward collectives (Join heartbeat, padding micro-batch)");
      ddp_.pre_forward();
      ddp_.post_forward({zero_loss(module_, ddp_.device())});
    }
    return guard;
  }

  void end_batch(int64_t iteration) override {
    if (!logging_ || !settings_.enable) return;
    auto scope = watch(watchdog_, "sync_dist logging allreduce (Join)");
    logging_->flush(/*padding=*/iteration >= plan().num_batches);
  }

  // A rank may leave at once (Join shadows it); the others learn of the stop
  // from the watchdog thread, and from the store itself after finish().
  bool stop_requested(bool local) override {
    return agree_stop(watchdog_, local, module_.runtime().state, /*lockstep=*/!settings_.enable,
                      /*sync=*/finished_ || !settings_.enable);
  }

  void finish() override {
    finished_ = true;
    {
      auto scope = watch(watchdog_, "Join (shadowing the ranks still training, final broadcast)");
      join_->join();
    }
    if (!settings_.enable) return;
    // In lockstep every rank took every step.
    if (settings_.mode == JoinMode::kLockstep && plan().joined_step) return;
    // Ranks that joined early took fewer optimizer steps; they now hold the
    // last joiner's model, so they take its step count too.
    RunState* state = module_.runtime().state;
    if (state != nullptr) {
      torch::Tensor steps = torch::tensor({state->global_step}, torch::kLong);
      state->global_step = strategy_.reduce(steps, ReduceOp::kMax).item<int64_t>();
    }
  }

 private:
  void check_even_batches() {
    const std::string per_rank = uneven_counts(strategy_, plan().num_batches);
    if (per_rank.empty()) return;
    throw Error(c10::str("uneven inputs with Join disabled (join_enable: false): the ranks have different numbers of "
                         "training batches this epoch (",
                         per_rank, "), so the ranks with more batches would wait forever in DDP's gradient "
                         "allreduce for the ranks that ran out. Set join_enable: true, or uneven_inputs: pad"));
  }

  Strategy& strategy_;
  CollectiveWatchdog* watchdog_;
  LightningModule& module_;
  DistributedDataParallel& ddp_;
  JoinSettings settings_;
  std::unique_ptr<LoggingJoinable> logging_;
  std::unique_ptr<Join> join_;
  bool finished_ = false;
};

}  // namespace

int64_t join_num_iterations(int64_t num_batches, int64_t accumulate_grad_batches, bool join_enabled) {
  if (!join_enabled) return num_batches;
  const int64_t k = std::max<int64_t>(1, accumulate_grad_batches);
  return (num_batches + k - 1) / k * k;
}

std::unique_ptr<TrainingEpochContext> make_no_sync_epoch_context(DDPEpochParts parts, LightningModule& module,
                                                                 const EpochPlan& plan) {
  return std::make_unique<NoSyncEpochContext>(plan, parts, module.runtime().state);
}

std::unique_ptr<TrainingEpochContext> make_join_epoch_context(DDPEpochParts parts, LightningModule& module,
                                                              const EpochPlan& plan, const JoinSettings& settings) {
  return std::make_unique<DDPJoinEpochContext>(plan, parts, module, settings);
}

}  // namespace lt
