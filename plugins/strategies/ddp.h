#pragma once
// DDPStrategy ("ddp"): data-parallel training over a c10d process group,
// one process per device (Lightning's strategies/ddp.py).
//
//   lt::Trainer trainer(lt::TrainerOptions().devices(2).strategy(
//       std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(60)))));
//   trainer.fit(model, data);   // in the supervisor of a local spawn this never returns: see below
//
// The strategy wires its parts together; each concern has its own file:
//   - where the ranks come from: plugins/environments/cluster_environment.h
//     (torchrun / RANK+WORLD_SIZE vars, SLURM, Open MPI / MPICH: this process
//     is one rank, and devices * num_nodes must equal the world size);
//   - a local spawn (none of these and devices > 1): the process that calls
//     fit/validate/test/predict becomes a pure supervisor that never returns
//     (plugins/launchers/subprocess_script.h, supervise_local_spawn). The
//     workers run main() again from the start, so everything before fit
//     runs on every rank, and everything after it only in the workers;
//   - the store and the process group: ddp/process_group.h; a
//     CollectiveWatchdog (ddp/collective_watchdog.h) turns a failure on any
//     rank into a report on every rank;
//   - the data: ddp/sharding.h (DistributedSampler per uneven_inputs);
//   - gradients: the module is wrapped in a DistributedDataParallel
//     (ddp/distributed_data_parallel.h) at setup(); training_step runs the
//     module's training_step between DDP's pre_forward and post_forward;
//   - the training epoch: ddp/epoch_contexts.h (no_sync accumulation, and
//     Join under uneven_inputs: join, checked first by ddp/join_compatibility.h).
// devices == 1 with no cluster launcher: a process group of one (single rank).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/strategies/ddp/collective_watchdog.h>
#include <lightning_cpp/plugins/strategies/ddp/distributed_data_parallel.h>
#include <lightning_cpp/plugins/strategies/ddp/join_compatibility.h>
#include <lightning_cpp/plugins/strategies/ddp/process_group.h>
#include <lightning_cpp/plugins/strategies/ddp/sharding.h>

namespace lt {

struct RunState;

struct DDPStrategyOptions {
  // "gloo", "nccl", or "" for the accelerator's default (cpu: gloo, cuda: nccl).
  TORCH_ARG(std::string, process_group_backend) = "";
  // Rendezvous and collective timeout (c10d's default is 30 minutes; a hung
  // rank should fail sooner).
  TORCH_ARG(std::chrono::milliseconds, process_group_timeout) = std::chrono::seconds(180);
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  TORCH_ARG(bool, find_unused_parameters) = false;
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  TORCH_ARG(bool, broadcast_buffers) = true;
  // Lightning's ddp_comm_hook (DDPCommHook): gradient compression.
  TORCH_ARG(DDPCommHook, ddp_comm_hook) = DDPCommHook::kAllreduce;
  // Local spawn only: kill the workers after this long (0: no limit).
  TORCH_ARG(std::chrono::milliseconds, launch_timeout) = std::chrono::milliseconds(0);
  // Local spawn only: write rank r's stdout+stderr to <dir>/rank<r>.log
  // (empty: the workers share the supervisor's terminal).
  TORCH_ARG(std::string, worker_log_dir) = "";
  // Uneven inputs (in YAML also trainer.uneven_inputs, trainer.join_*: aliases).
  TORCH_ARG(UnevenInputs, uneven_inputs) = UnevenInputs::kJoin;
  // Join (uneven_inputs kJoin), as PyTorch's Join / DDP.join arguments:
  // enable=false trains without Join (uneven batch counts are then an error);
  // throw_on_early_termination: every rank throws EarlyTerminationError at the
  // first iteration some rank does not have; divide_by_initial_world_size=false
  // averages each window's gradient over the ranks with data in it.
  TORCH_ARG(bool, join_enable) = true;
  TORCH_ARG(bool, join_throw_on_early_termination) = false;
  TORCH_ARG(bool, join_divide_by_initial_world_size) = true;
  // lockstep: a joined rank steps with the others (replicas stay identical);
  // pytorch: as torch.distributed.algorithms.join (see JoinMode).
  TORCH_ARG(JoinMode, join_mode) = JoinMode::kLockstep;

 public:
  JoinSettings join_settings() const {
    return {join_enable(), join_throw_on_early_termination(), join_divide_by_initial_world_size(), join_mode()};
  }
};

class DDPStrategy : public Strategy {
 public:
  explicit DDPStrategy(DDPStrategyOptions options = {});
  ~DDPStrategy() override;
  std::string name() const override { return "ddp"; }
  // uneven_inputs kJoin with uneven shards: the Join-compatibility check
  // (ddp/join_compatibility.h). Even shards need none.
  void check_features(const FeatureSet& features) override;

  // -- lifecycle ---------------------------------------------------------------
  // Once per process (later calls return at once): picks the cluster
  // environment, supervises a local spawn (never returns there), creates the
  // store and the process group.
  void setup_environment(const TrainerOptions& options) override;
  // Moves the module to the root device and wraps it (collective: broadcast from rank 0).
  void setup(LightningModule& module) override;
  // Drops the DDP wrapper; keeps the process group for a later validate/test.
  void teardown() override;
  // Waits for every rank at the end of a fit (a store barrier): a rank that
  // ran out of batches waits here, and a peer's failure or hang is reported.
  void on_train_end() override;
  // Every rank's part in the failure (ddp/collective_watchdog.h).
  std::exception_ptr on_exception(const std::exception& e) override;
  torch::Device root_device() const override { return device_; }
  int64_t global_rank() const override { return rank_; }
  // Before setup_environment: what the environment says (Trainer::fit runs
  // prepare_data on local rank 0 before it sets up the environment).
  int64_t local_rank() const override;
  int64_t world_size() const override { return world_size_; }
  int64_t node_rank() const { return node_rank_; }

  // -- data ----------------------------------------------------------------------
  void process_dataloader(DataLoader& loader, Stage stage, const TrainerOptions& options) override;

  // -- training ------------------------------------------------------------------
  torch::Tensor training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) override;
  void backward(const torch::Tensor& loss, LightningModule& module) override;
  void optimizer_step(torch::optim::Optimizer& optimizer) override;
  std::unique_ptr<TrainingEpochContext> training_epoch_context(LightningModule& module,
                                                               const EpochPlan& plan) override;

  // -- collectives (each waits for its Work) ----------------------------------------
  torch::Tensor reduce(const torch::Tensor& tensor, ReduceOp op = ReduceOp::kMean) override;
  // Every rank's tensor must have the same shape.
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  std::vector<std::string> all_gather_bytes(const std::string& bytes) override;
  torch::Tensor broadcast(const torch::Tensor& tensor, int64_t src = 0) override;
  void barrier(const std::string& name = {}) override;
  bool reduce_boolean_decision(bool decision, bool all = true) override;

  // -- for Join, callbacks and tests ---------------------------------------------------
  const DDPStrategyOptions& options() const { return options_; }
  // Between runs (a Trainer's fit/validate/test) the run settings may change:
  // uneven_inputs, join_*, bucket and buffer options. The process group is
  // made once per process, with the first run's backend and timeout.
  DDPStrategyOptions& options() { return options_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return connection_.process_group; }
  // Null outside setup()..teardown().
  DistributedDataParallel* ddp() const { return ddp_.get(); }
  const ClusterEnvironment* cluster_environment() const { return environment_.get(); }

 private:
  // Marks a collective as running on this rank, for the failure report (inert with one rank).
  CollectiveWatchdog::Scope watch(const char* collective) {
    return CollectiveWatchdog::Scope(watchdog_.get(), collective);
  }
  // Throws, before issuing it, a collective that ranks which ran out of data
  // could not match: uneven inputs under Join, in hooks they do not run
  // (RunState::unmatched_hooks).
  void check_matched(const char* collective) const;

  DDPStrategyOptions options_;
  std::unique_ptr<ClusterEnvironment> environment_;
  DistributedConnection connection_;  // the store, the DDP process group
  // The collective layers' group (core/collective_layer.h), made when a module first has one.
  c10::intrusive_ptr<c10d::ProcessGroup> layer_sync_group_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // world size > 1
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
