#pragma once
// DDPStrategy ("ddp"): data-parallel training over a c10d process group,
// one process per device (Lightning's strategies/ddp.py).
//
//   lt::Trainer trainer(lt::TrainerOptions().devices(2).strategy(
//       std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(60)))));
//   trainer.fit(model, data);   // in the supervisor of a local spawn this never returns: see below
//
// Where the ranks come from (plugins/environments/cluster_environment.h):
//   - torchrun / RANK+WORLD_SIZE vars, SLURM, Open MPI / MPICH: this process
//     is one rank; devices * num_nodes must equal the world size.
//   - none of these and devices > 1: a local spawn. The process that calls
//     fit/validate/test/predict becomes a pure supervisor: it re-executes
//     its own command line (self_argv) devices times with LT_LOCAL_SPAWN=1,
//     RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, LT_LOCAL_STORE, MASTER_ADDR=127.0.0.1
//     and MASTER_PORT=<free port>, waits for them, and then ENDS THE PROCESS
//     with std::exit: 0 when every worker succeeded, else (after a message
//     naming the failed rank on stderr) that rank's exit code, 128 + the
//     signal that killed it, or 124 when launch_timeout passed; the launcher
//     terminates the other workers first (SIGTERM, then SIGKILL).
//     The workers run main() again from the start, so everything before
//     fit runs on every rank, and everything after it only in the workers.
//   - devices == 1 with none of these: a process group of one (single rank).
// The store: a local spawn's workers share a c10d::FileStore in a private
// (0700) directory the supervisor creates and removes, so they listen on no
// socket but gloo's on 127.0.0.1 (LibTorch 1.13's TCPStore can only listen
// on every interface). Otherwise rank 0 hosts the c10d::TCPStore at
// MASTER_ADDR:MASTER_PORT. Every rank creates the process group with
// process_group_timeout, and a CollectiveWatchdog (collective_watchdog.h)
// that turns a failure on any rank into a report on every rank.
// Backends: gloo (CPU tensors; the default on CPU), nccl (only in builds
// with LibTorch's CUDA and the NCCL headers; the default with accelerator
// cuda); asking for nccl without it is an lt::Error.
//
// Data: the training loader's sampler becomes a DistributedSampler
// (shuffle and seed from the loader) whose padding follows
// TrainerOptions::uneven_inputs: kPad pads as PyTorch does; kJoin shards
// without padding (uneven; Join keeps collectives matched); kError shards
// without padding and, before any training collective, allgathers the
// per-rank batch counts and throws if they differ. Evaluation loaders are
// sharded without padding, unless that would give ranks different batch
// counts (then padded: a few samples count twice), so that sync_dist
// logging issues the same collectives on every rank.
//
// Gradients: the module is wrapped in a DistributedDataParallel (see
// distributed_data_parallel.h) at setup(); training_step runs the module's
// training_step between DDP's pre_forward and post_forward; accumulation
// micro-batches run under no_sync (the epoch context's BatchGuard), so only
// the micro-batch that ends an accumulation window reduces gradients.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/strategies/ddp/collective_watchdog.h>
#include <lightning_cpp/plugins/strategies/ddp/distributed_data_parallel.h>

namespace lt {

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
  // Local spawn only: kill the workers after this long (0: no limit).
  TORCH_ARG(std::chrono::milliseconds, launch_timeout) = std::chrono::milliseconds(0);
  // Local spawn only: write rank r's stdout+stderr to <dir>/rank<r>.log
  // (empty: the workers share the supervisor's terminal).
  TORCH_ARG(std::string, worker_log_dir) = "";
};

class DDPStrategy : public Strategy {
 public:
  explicit DDPStrategy(DDPStrategyOptions options = {});
  ~DDPStrategy() override;
  std::string name() const override { return "ddp"; }
  // uneven_inputs kJoin: the Join-compatibility check (plugins/strategies/join_compatibility.h).
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
  // Every rank's part in the failure (plugins/strategies/collective_watchdog.h).
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
  torch::Tensor broadcast(const torch::Tensor& tensor, int64_t src = 0) override;
  void barrier(const std::string& name = {}) override;
  bool reduce_boolean_decision(bool decision, bool all = true) override;

  // -- for Join, callbacks and tests ---------------------------------------------------
  const DDPStrategyOptions& options() const { return options_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return process_group_; }
  // Null outside setup()..teardown().
  DistributedDataParallel* ddp() const { return ddp_.get(); }
  const ClusterEnvironment* cluster_environment() const { return environment_.get(); }
  UnevenInputs uneven_inputs() const { return uneven_inputs_; }
  // Marks a collective as running on this rank, for the failure report (inert with one rank).
  CollectiveWatchdog::Scope watch(const char* collective) {
    return CollectiveWatchdog::Scope(watchdog_.get(), collective);
  }
  // Whether every rank stops at this boundary (see TrainingEpochContext::stop_requested).
  bool agree_stop(bool local, int64_t step, bool lockstep, bool sync);
  // The epoch context used when uneven_inputs is not kJoin: no_sync on accumulation micro-batches.
  std::unique_ptr<TrainingEpochContext> no_sync_epoch_context(LightningModule& module, const EpochPlan& plan);

 protected:
  // uneven_inputs == kJoin. THE ONE PLACE the Join context plugs in: it
  // returns make_ddp_join_epoch_context(...) (plugins/strategies/ddp_join.h).
  virtual std::unique_ptr<TrainingEpochContext> join_epoch_context(LightningModule& module, const EpochPlan& plan);

 private:
  // The supervisor of a local spawn: launch, wait, std::exit.
  [[noreturn]] void launch_local_workers(int64_t num_processes);
  void init_process_group(const std::string& backend);
  std::string resolve_backend(const TrainerOptions& options) const;
  void check_even_batches(int64_t local_batches);

  DDPStrategyOptions options_;
  std::unique_ptr<ClusterEnvironment> environment_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<CollectiveWatchdog> watchdog_;  // world size > 1
  UnevenInputs uneven_inputs_ = UnevenInputs::kJoin;
  bool join_enable_ = true;
  torch::Device device_{torch::kCPU};
  int64_t rank_ = 0;
  int64_t local_rank_ = 0;
  int64_t node_rank_ = 0;
  int64_t world_size_ = 1;
};

}  // namespace lt
