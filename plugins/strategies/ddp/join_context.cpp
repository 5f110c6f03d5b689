#include <lightning_cpp/plugins/strategies/ddp/join_context.h>

#include <optional>

#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/plugins/join/join.h>
#include <lightning_cpp/plugins/strategies/ddp.h>
#include <lightning_cpp/plugins/strategies/ddp/joinable_logging.h>

namespace lt {

namespace {

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
  DDPJoinEpochContext(EpochPlan plan, DDPStrategy& strategy, LightningModule& module, JoinSettings settings)
      : TrainingEpochContext(plan), strategy_(strategy), module_(module), ddp_(*strategy.ddp()), settings_(settings) {
    if (!settings_.enable) check_even_batches();
    ddp_.set_divide_by_initial_world_size(settings_.divide_by_initial_world_size);
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
      auto scope = strategy_.watch("DDP forward collectives (Join heartbeat, padding micro-batch)");
      ddp_.pre_forward();
      ddp_.post_forward({zero_loss(module_, ddp_.device())});
    }
    return guard;
  }

  void end_batch(int64_t iteration) override {
    if (!logging_ || !settings_.enable) return;
    auto scope = strategy_.watch("sync_dist logging allreduce (Join)");
    logging_->flush(/*padding=*/iteration >= plan().num_batches);
  }

  // A rank may leave at once (Join shadows it); the others learn of the stop
  // from the watchdog thread, and from the store itself after finish().
  bool stop_requested(bool local) override {
    const RunState* state = module_.runtime().state;
    return strategy_.agree_stop(local, state != nullptr ? state->global_step : 0, /*lockstep=*/!settings_.enable,
                                /*sync=*/finished_ || !settings_.enable);
  }

  void finish() override {
    finished_ = true;
    {
      auto scope = strategy_.watch("Join (shadowing the ranks still training, final broadcast)");
      join_->join();
    }
    if (!settings_.enable) return;
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
    const torch::Tensor counts = strategy_.all_gather(torch::tensor({plan().num_batches}, torch::kLong)).flatten();
    if ((counts == counts[0]).all().item<bool>()) return;
    std::string per_rank;
    for (int64_t r = 0; r < counts.size(0); ++r) {
      per_rank += c10::str(r == 0 ? "" : ", ", "rank ", r, ": ", counts[r].item<int64_t>());
    }
    throw Error(c10::str("uneven inputs with Join disabled (join_enable: false): the ranks have different numbers of "
                         "training batches this epoch (",
                         per_rank, "), so the ranks with more batches would wait forever in DDP's gradient "
                         "allreduce for the ranks that ran out. Set join_enable: true, or uneven_inputs: pad"));
  }

  DDPStrategy& strategy_;
  LightningModule& module_;
  DistributedDataParallel& ddp_;
  JoinSettings settings_;
  std::unique_ptr<LoggingJoinable> logging_;
  std::unique_ptr<Join> join_;
  bool finished_ = false;
};

}  // namespace

JoinSettings join_settings(const TrainerOptions& options) {
  JoinSettings s;
  s.enable = options.join_enable();
  s.throw_on_early_termination = options.join_throw_on_early_termination();
  s.divide_by_initial_world_size = options.join_divide_by_initial_world_size();
  return s;
}

int64_t join_num_iterations(int64_t num_batches, int64_t accumulate_grad_batches, bool join_enabled) {
  if (!join_enabled) return num_batches;
  const int64_t k = std::max<int64_t>(1, accumulate_grad_batches);
  return (num_batches + k - 1) / k * k;
}

std::unique_ptr<TrainingEpochContext> make_ddp_join_epoch_context(DDPStrategy& strategy, LightningModule& module,
                                                                  const EpochPlan& plan) {
  LT_CHECK(strategy.ddp() != nullptr, "strategy ddp: no module is wrapped (setup() not called)");
  const JoinSettings settings = plan.options != nullptr ? join_settings(*plan.options) : JoinSettings{};
  return std::make_unique<DDPJoinEpochContext>(plan, strategy, module, settings);
}

}  // namespace lt
