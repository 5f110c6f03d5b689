#pragma once
// ParallelStrategy: everything about being one of several processes, for any
// strategy whose ranks train one model together (Lightning's
// strategies/parallel.py). A strategy on it implements only how gradients
// move: make_gradient_sync() wraps the module in a GradientSync
// (plugins/join/gradient_sync.h); DDP's is c10d's Reducer
// (strategies/ddp/). The base gives it:
//   - where the ranks come from (plugins/environments) and, with none of
//     torchrun, SLURM or MPI and devices > 1, a Launcher (configure_launcher):
//     the process that calls fit/validate/test/predict becomes a supervisor
//     that never returns (plugins/launchers/subprocess_script.h); the workers
//     run main() again; manual multi-node: LocalEnvironment::nodes();
//   - the store and the process group (plugins/distributed/process_group.h),
//     and a CollectiveWatchdog (distributed/collective_watchdog.h) that turns a
//     failure on any rank into a report on every rank;
//   - the data: each rank's shard per uneven_inputs (distributed/uneven_inputs.h);
//   - Join: the compatibility check before the first step, and the training
//     epoch's one context of no_sync accumulation and lockstep Join
//     (plugins/join/epoch_context.h), over the strategy's GradientSync and
//     any joinables added with add_joinable();
//   - the collective layers' own process group (core/collective_layer.h);
//   - the collectives, watched, and refused where a rank that ran out of data
//     could not match them (uneven inputs under Join, in hooks it does not run).
// devices == 1 with no cluster launcher: a process group of one.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/plugins/distributed/collective_watchdog.h>
#include <lightning_cpp/plugins/distributed/collectives.h>
#include <lightning_cpp/plugins/distributed/process_group.h>
#include <lightning_cpp/plugins/distributed/uneven_inputs.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/join/gradient_sync.h>
#include <lightning_cpp/plugins/join/join_compatibility.h>
#include <lightning_cpp/plugins/launchers/launcher.h>

namespace lt {

struct RunState;

// The YAML names of the settings every parallel strategy's options carry.
template <>
struct OptionEnumNames<UnevenInputs> {
  static constexpr std::pair<UnevenInputs, const char*> kNames[] = {
      {UnevenInputs::kJoin, "join"}, {UnevenInputs::kPad, "pad"}, {UnevenInputs::kError, "error"}};
};
template <>
struct OptionEnumNames<JoinMode> {
  static constexpr std::pair<JoinMode, const char*> kNames[] = {{JoinMode::kLockstep, "lockstep"},
                                                                {JoinMode::kPyTorch, "pytorch"}};
};

// What the base reads from a strategy's options, at each use (a strategy's
// options may change between a Trainer's runs; the process group is made
// once per process, with the first run's backend and timeout).
struct ParallelSettings {
  std::string process_group_backend;  // "gloo", "nccl", or "" for the accelerator's default
  std::chrono::milliseconds process_group_timeout{std::chrono::seconds(180)};
  std::chrono::milliseconds launch_timeout{0};  // local spawn: kill the workers after this long (0: never)
  std::string worker_log_dir;                   // local spawn: rank r's output to <dir>/rank<r>.log
  UnevenInputs uneven_inputs = UnevenInputs::kJoin;
  JoinSettings join;
};

// The settings from a strategy's options, which carry the rows of
// strategies/parallel_options.def.
template <typename Options>
ParallelSettings parallel_settings_of(const Options& options, JoinMode mode) {
  return {options.process_group_backend(),
          options.process_group_timeout(),
          options.launch_timeout(),
          options.worker_log_dir(),
          options.uneven_inputs(),
          JoinSettings{options.join_enable(), options.join_throw_on_early_termination(),
                       options.join_divide_by_initial_world_size(), mode}};
}

class ParallelStrategy : public Strategy {
 public:
  ParallelStrategy();
  ~ParallelStrategy() override;

  // -- lifecycle ---------------------------------------------------------------
  // Once per process (later calls return at once): picks the cluster
  // environment, supervises a local spawn (never returns there), creates the
  // store and the process group.
  void setup_environment(const TrainerOptions& options) override;
  // The collective watchdog's run: a failure from here on is reported on every rank.
  void on_run_start(const RunState& state) override;
  // Checks that every rank runs the same options, model and versions, then
  // moves the module to the root device and wraps it in the strategy's
  // gradient sync (a collective: make_gradient_sync).
  void setup(LightningModule& module) override;
  // Drops the gradient sync; keeps the process group for a later validate/test.
  void teardown() override;
  // Waits for every rank at the end of a fit (a store barrier): a rank that
  // ran out of batches waits here, and a peer's failure or hang is reported.
  void on_train_end() override;
  // Every rank's part in the failure (distributed/collective_watchdog.h).
  std::exception_ptr on_exception(const std::exception& e) override;
  torch::Device root_device() const override { return device_; }
  int64_t global_rank() const override { return rank_; }
  // Before setup_environment: what the environment says (Trainer::fit runs
  // prepare_data on local rank 0 before it sets up the environment).
  int64_t local_rank() const override;
  int64_t world_size() const override { return world_size_; }
  int64_t node_rank() const { return node_rank_; }
  // uneven_inputs kJoin with uneven shards: the Join-compatibility check
  // (join/join_compatibility.h). Even shards need none.
  void check_features(const FeatureSet& features) override;

  // -- data --------------------------------------------------------------------
  void process_dataloader(DataLoader& loader, Stage stage, const TrainerOptions& options) override;

  // -- training ----------------------------------------------------------------
  // The gradient sync's before_forward and after_forward.
  void before_forward(LightningModule& module) override;
  void after_forward(LightningModule& module, const torch::Tensor& output) override;
  void backward(const torch::Tensor& loss, LightningModule& module) override;
  void release_gradients() override;
  void after_optimizer_step() override;
  std::unique_ptr<TrainingEpochContext> training_epoch_context(LightningModule& module,
                                                               const EpochPlan& plan) override;

  // -- collectives (each waits for its Work) ---------------------------------------
  torch::Tensor reduce(const torch::Tensor& tensor, ReduceOp op = ReduceOp::kMean) override;
  // Every rank's tensor must have the same shape.
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  std::vector<std::string> all_gather_bytes(const std::string& bytes) override;
  torch::Tensor broadcast(const torch::Tensor& tensor, int64_t src = 0) override;
  void barrier(const std::string& name = {}) override;
  bool reduce_boolean_decision(bool decision, bool all = true) override;

  // -- parts ---------------------------------------------------------------------
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return connection_.process_group; }
  const ClusterEnvironment* cluster_environment() const { return environment_.get(); }
  // Null with one rank.
  CollectiveWatchdog* collective_watchdog() const { return watchdog_.get(); }
  // Null outside setup()..teardown(), and for a module with nothing to train.
  GradientSync* gradient_sync() const { return sync_.get(); }
  // A Joinable that joins every training epoch's Join after the gradient sync
  // (an optimizer that communicates, a user's own per-iteration collective).
  // Its main hook runs after the sync's, which includes the lockstep step: a
  // collective issued before the step matches only where the step issues
  // none (ddp; not fsdp's gathers: docs/distributed.md).
  void add_joinable(std::shared_ptr<Joinable> joinable);

 protected:
  virtual ParallelSettings parallel_settings() const = 0;
  // Wraps `module` (on the root device) in the strategy's gradient sync over
  // `group`; every rank at once. `stop_wish`, when set, is this rank's wish to
  // stop (a signal), for a sync that carries the agreed stop.
  virtual std::unique_ptr<GradientSync> make_gradient_sync(std::shared_ptr<torch::nn::Module> module,
                                                           const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                           std::function<bool()> stop_wish) = 0;
  // A process group of these global ranks (this one among them), for a
  // strategy that talks within parts of the world (fsdp's HYBRID_SHARD); its
  // members create it together, under a `name` no other group has.
  c10::intrusive_ptr<c10d::ProcessGroup> new_group(const std::string& name, const std::vector<int64_t>& ranks) const;
  // Marks a collective as running on this rank, for the failure report (inert with one rank).
  CollectiveWatchdog::Scope watch(const char* collective) const {
    return CollectiveWatchdog::Scope(watchdog_.get(), collective);
  }
  // "strategy <name>", the prefix of the base's messages.
  std::string who() const { return "strategy " + name(); }
  // The strategy's options as YAML writes them (LT_OPTION_SHOW over its
  // table), which the ranks compare before the first step; the base leaves
  // out the local spawn's and the timeout, which may differ.
  virtual OptionValues option_values() const { return {}; }

 protected:
  // Lightning's _configure_launcher: how this node's workers start where
  // nothing outside started them (a local spawn, one node or the manual
  // multi-node way).
  virtual std::unique_ptr<Launcher> configure_launcher(const TrainerOptions& options) const;

 private:
  // Throws, before issuing it, a collective that ranks which ran out of data
  // could not match: uneven inputs under Join, in hooks they do not run
  // (RunState::unmatched_hooks).
  void check_matched(const char* collective) const;
  WatchedCollectives collectives() const;
  // Refuses, on every rank, a run whose ranks differ in what shapes their
  // collectives (distributed/rank_agreement.h): before anything else in setup().
  void check_ranks_agree(const LightningModule& module);

  OptionValues trainer_values_;  // the run's TrainerOptions::rank_agreed_options (setup_environment)
  std::unique_ptr<ClusterEnvironment> environment_;
  DistributedConnection connection_;  // the store, the process group
  // The collective layers' group (core/collective_layer.h), made when a module first has one.
  c10::intrusive_ptr<c10d::ProcessGroup> layer_sync_group_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // world size > 1
  std::unique_ptr<GradientSync> sync_;
  std::vector<std::shared_ptr<Joinable>> joinables_;
  torch::Device device_{torch::kCPU};
  const RunState* run_state_ = nullptr;  // the current run's (setup)
  bool uneven_join_ = false;             // this fit trains uneven inputs under Join (check_features)
  int64_t manual_syncs_ = 0;             // gradient-reducing manual_backward calls in this training_step
  int64_t rank_ = 0;
  int64_t local_rank_ = 0;
  int64_t node_rank_ = 0;
  int64_t world_size_ = 1;
};

}  // namespace lt
