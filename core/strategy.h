#pragma once
// Strategy: owns everything parallel. Loops call it for the training step,
// backward, optimizer step, collectives and the per-epoch context; they never
// touch c10d themselves.

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/checkpoint_plugin.h>
#include <lightning_cpp/core/join_support.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/precision.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/core/types.h>

namespace lt {

class Callback;
struct RunState;
class DataLoader;

class ResultCollection;

// What the loop iterating a training epoch does that a rank which ran out of
// data must do with the others (Join): the Trainer's training epoch loop and
// Fabric::join implement it; the strategy's epoch context calls it.
class EpochSteps {
 public:
  virtual ~EpochSteps() = default;
  // Whether optimizer_step() can run without a micro-batch of this rank's
  // (false: manual optimization, whose steps are the user's training_step).
  virtual bool steps_without_batch() const = 0;
  // The optimizer step on the gradients already in param.grad (automatic
  // optimization: clipping, step, hooks, zero_grad, global_step, per-step
  // scheduler; Fabric: the user's step): a padding micro-batch's at a
  // window's end, and a joined rank's with the others (lockstep Join).
  virtual void optimizer_step() = 0;
  // After a rank that joined shadowed iteration `iteration` of the ranks still
  // training (RunState::epoch_iteration already counts it): the end of that
  // iteration as they run it (the step-end hooks after a lockstep step;
  // validation at a validation point).
  virtual void joined_iteration_end(int64_t iteration) = 0;
};

// One training epoch as a rank sees it.
struct EpochPlan {
  // This rank's batches (after limit_train_batches); -1 for a stream of
  // unknown length until the loop finds its end (set_num_batches).
  int64_t num_batches = 0;
  int64_t accumulate_grad_batches = 1;
  // The iteration the epoch starts at: 0, or where a mid-epoch checkpoint
  // left it (at an accumulation window's end).
  int64_t first_iteration = 0;
  // Every rank stops once global_step reaches it; -1: never.
  int64_t max_steps = -1;
  // The run's state (global_step, should_stop, epoch_iteration): never null.
  RunState* state = nullptr;
  // The training step's logged values (Join reduces their sync_dist ones
  // with the joined ranks); null where nothing logs (Fabric).
  ResultCollection* results = nullptr;
  // The loop's steps; never null.
  EpochSteps* steps = nullptr;
};

// RAII guard around one micro-batch (DDP: no_sync on accumulation micro-batches).
class BatchGuard {
 public:
  virtual ~BatchGuard() = default;
};

// The context a strategy gives the training epoch loop for one epoch.
// Iterations [0, num_batches) are real micro-batches; iterations
// [num_batches, num_iterations()) are zero-loss micro-batches a strategy may
// ask for so that this rank completes its last accumulation window together
// with the other ranks (see plugins/join/epoch_context.h).
class TrainingEpochContext {
 public:
  // plan.state and plan.steps are never null.
  explicit TrainingEpochContext(EpochPlan plan);
  virtual ~TrainingEpochContext() = default;
  const EpochPlan& plan() const { return plan_; }
  // A stream's end, found by the loop: from here num_iterations() counts.
  void set_num_batches(int64_t num_batches) { plan_.num_batches = num_batches; }
  virtual int64_t num_iterations() const { return plan_.num_batches; }
  // The epoch's length in micro-batches as every rank counts it (validation
  // points, the epoch's end): the longest rank's num_batches under Join.
  virtual int64_t epoch_length() const { return plan_.num_batches; }
  // `sync_gradients` is false on accumulation micro-batches.
  virtual std::unique_ptr<BatchGuard> batch(int64_t /*iteration*/, bool /*sync_gradients*/) { return nullptr; }
  // After the iteration's optimization (backward, optimizer step), before the
  // guard is released and the batch-end hooks run. May run collectives (Join:
  // the micro-batch's sync_dist logging reduction).
  virtual void end_batch(int64_t /*iteration*/) {}
  // Whether every rank stops at this optimizer-step boundary, given this
  // rank's wish (a signal); asked at each boundary and once more after
  // finish(). A strategy whose ranks must stay in lockstep agrees on the
  // step across ranks; under Join a rank may simply leave early.
  virtual bool stop_requested(bool local) { return local; }
  // Whether every rank stops after the current iteration: max_steps,
  // should_stop (set alike on every rank, as callbacks reduce it), or at an
  // accumulation window's end a stop the ranks agreed on (stop_requested with
  // this process's signal). Asked after each iteration, a shadowed one too
  // (scheduled Join).
  bool stops_after(bool window_end);
  bool max_steps_reached() const;
  // After the last iteration, before epoch-end validation and hooks. May run
  // collectives (Join: shadow the ranks still training, then post hooks).
  virtual void finish() {}

 private:
  EpochPlan plan_;
};

// Everything in a run that the strategy may need to judge (Join compatibility).
struct FeatureSet {
  const TrainerOptions* options = nullptr;
  const LightningModule* module = nullptr;
  std::vector<const Callback*> callbacks;
  bool has_validation = false;
  bool scheduler_per_step = false;
  int64_t train_batches = 0;  // this rank's training batches per epoch (after limit_train_batches)
};

// Makes `device` the current CUDA device (a CUDA device with an index; a
// no-op for any other): a process's CUDA work, NCCL's communicators among it,
// then lands on its own GPU, not on GPU 0.
void set_current_device(const torch::Device& device);

// The norm_type-norm of `grads`: this rank's sum of |g|^p (or largest |g|,
// `inf`) through `combine` (another rank's parts added; null: none), then
// the p-th root. For a strategy's gradient_norm.
double gradient_norm_of(const std::vector<torch::Tensor>& grads, double norm_type,
                        const std::function<double(double partial, bool inf)>& combine);

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;

  // -- lifecycle ---------------------------------------------------------------
  // First thing in fit/validate/test/predict: process groups, launching workers.
  virtual void setup_environment(const TrainerOptions& /*options*/) {}
  // The start of each run (fit/validate/test/predict), after
  // setup_environment, before any of the run's collectives; teardown() ends it.
  virtual void on_run_start(const RunState& /*state*/) {}
  // Moves the module to root_device() and wraps it (DDP).
  virtual void setup(LightningModule& module);
  virtual void teardown() {}
  // The end of a successful fit, on every rank (DDP: waits for the others).
  virtual void on_train_end() {}
  // The run failed with `e` (called from the Trainer's catch block). Returns
  // what the run ends with: the original (std::current_exception()) or a
  // report of every rank's part in it (DDP).
  virtual std::exception_ptr on_exception(const std::exception& /*e*/) { return std::current_exception(); }
  virtual torch::Device root_device() const { return torch::kCPU; }
  virtual int64_t global_rank() const { return 0; }
  virtual int64_t local_rank() const { return 0; }
  virtual int64_t world_size() const { return 1; }
  bool is_global_zero() const { return global_rank() == 0; }
  // Checks what the run uses before the first step; throws lt::Error listing every problem.
  virtual void check_features(const FeatureSet& /*features*/) {}

  // -- data --------------------------------------------------------------------
  // Replaces the loader's sampler where the strategy shards data.
  virtual void process_dataloader(DataLoader& /*loader*/, Stage /*stage*/, const TrainerOptions& /*options*/) {}

  // Moves every tensor of a batch to root_device().
  virtual Batch batch_to_device(Batch batch) const;

  // -- training ----------------------------------------------------------------
  // A micro-batch's forward runs between before_forward (the strategy's
  // forward-side collectives; DDP: the Join heartbeat, buffer broadcast, the
  // grad-sync flag) and after_forward (what its output, where backward starts,
  // decides; DDP: unused parameters). training_step runs the module's
  // training_step between them; Fabric, a user's own forward.
  virtual void before_forward(LightningModule& /*module*/) {}
  virtual void after_forward(LightningModule& /*module*/, const torch::Tensor& /*output*/) {}
  torch::Tensor training_step(LightningModule& module, const Batch& batch, int64_t batch_idx);
  virtual void backward(const torch::Tensor& loss, LightningModule& module);
  // release_gradients(), optimizer.step(), after_optimizer_step().
  void optimizer_step(torch::optim::Optimizer& optimizer);
  // The same around a step of the caller's (Fabric's: the user's step, which
  // may step several optimizers).
  void run_optimizer_step(const std::function<void()>& step);
  // After a window's gradients were reduced, before the optimizer step and
  // zero_grad: a strategy whose gradients alias its own buffers (DDP's
  // gradient_as_bucket_view) detaches them, so that zero_grad can reset them.
  virtual void release_gradients() {}
  // After the optimizer step, on every rank (a joined one's too): a sharding
  // strategy gathers the updated shards here (a collective).
  virtual void after_optimizer_step() {}
  virtual std::unique_ptr<TrainingEpochContext> training_epoch_context(LightningModule& module,
                                                                       const EpochPlan& plan);

  // -- evaluation ----------------------------------------------------------------
  // Around an evaluation loop (validation, test), every rank at the
  // same point: ranks evaluate different numbers of batches, so a strategy
  // that shards parameters gathers them here (a collective) and frees them after.
  virtual void on_evaluation_start() {}
  virtual void on_evaluation_end() {}

  // -- state that stays true where a rank holds only a part of it --------------
  // Every rank calls each of these at the same point; a sharding strategy's
  // are collectives. The defaults are a rank that holds everything.
  // The module's optimizers and schedulers for this run (Lightning's
  // setup_optimizers): configure_optimizers(), normalized and checked. A
  // sharding strategy wraps the optimizers around its shards here.
  virtual OptimizerConfig setup_optimizers(LightningModule& module);
  // The module's whole state as a checkpoint holds it (consolidated where sharded).
  virtual c10::Dict<std::string, torch::Tensor> module_state(LightningModule& module);
  virtual void load_module_state(LightningModule& module, const c10::Dict<std::string, torch::Tensor>& state);
  // An optimizer's whole state (consolidated where sharded), as
  // core/optimizer_state.h lays it out.
  virtual c10::IValue optimizer_state(torch::optim::Optimizer& optimizer);
  virtual void load_optimizer_state(torch::optim::Optimizer& optimizer, const c10::IValue& state,
                                    const std::string& where);
  // Clips the gradients of the optimizer's parameters: by their global norm
  // (over every rank's part) or by value. clip_val <= 0: nothing.
  virtual void clip_gradients(torch::optim::Optimizer& optimizer, double clip_val, GradientClipAlgorithm algorithm);
  // The norm_type-norm (p > 0, or infinity) of all the gradients the
  // optimizer steps with, over every rank's part where shards hold them
  // (fsdp, a collective on every rank); here, this rank's. 0 before any.
  virtual double gradient_norm(torch::optim::Optimizer& optimizer, double norm_type = 2.0);
  // Whether every tensor is finite (NaN and infinities), decided alike on
  // every rank: where ranks hold different gradients or losses, all ranks
  // learn whether any found one.
  virtual bool all_finite(const std::vector<torch::Tensor>& tensors);
  // Writes the checkpoint every rank dumped (which rank writes what: here
  // global rank 0 writes the whole file, through checkpoint_io()), then every
  // rank waits for it.
  virtual void save_checkpoint(const c10::IValue& checkpoint, const std::string& path);
  // Reads a checkpoint a run resumes from (Lightning's load_checkpoint):
  // checkpoint_io()'s; a sharding strategy leaves a sharded checkpoint's
  // values placeholders its loads read their parts of.
  virtual c10::IValue load_checkpoint(const std::string& path);
  // Removes a checkpoint (ModelCheckpoint's older ones): global rank 0, through checkpoint_io().
  virtual void remove_checkpoint(const std::string& path);

  // -- collectives (identity in one process) -------------------------------------
  virtual torch::Tensor reduce(const torch::Tensor& tensor, ReduceOp op = ReduceOp::kMean);
  // Stacks every rank's tensor along a new leading dimension.
  virtual torch::Tensor all_gather(const torch::Tensor& tensor);
  // Every rank's bytes, by rank (sizes may differ): what all_gather cannot
  // carry (names, tensors of different shapes; serialize with torch::pickle_save).
  virtual std::vector<std::string> all_gather_bytes(const std::string& bytes);
  virtual torch::Tensor broadcast(const torch::Tensor& tensor, int64_t src = 0);
  virtual void barrier(const std::string& /*name*/ = {}) {}
  // all=true: true iff every rank decided true; all=false: true iff any did.
  virtual bool reduce_boolean_decision(bool decision, bool all = true);

  // -- checkpoint I/O (Lightning's strategy.checkpoint_io, which the strategy owns) --
  // The Trainer and Fabric give a strategy without one lt::TorchCheckpointIO
  // (plugins/io/torch_plugin.h); set another before the run to change the format.
  void set_checkpoint_io(std::shared_ptr<CheckpointIO> checkpoint_io);
  bool has_checkpoint_io() const { return checkpoint_io_ != nullptr; }
  // Throws lt::Error where none was set.
  CheckpointIO& checkpoint_io() const;

  // -- precision (Lightning's precision plugin, which the strategy owns) ---------
  void set_precision(std::shared_ptr<Precision> precision);
  const Precision& precision() const { return *precision_; }
  Precision& precision() { return *precision_; }
  // A batch for the module: on the device, in the precision's dtype.
  Batch prepare_batch(Batch batch) const { return precision_->convert_input(batch_to_device(std::move(batch))); }

 private:
  std::shared_ptr<Precision> precision_ = std::make_shared<FullPrecision>();
  std::shared_ptr<CheckpointIO> checkpoint_io_;
};

// The smallest and the largest of the ranks' `local` counts (a collective:
// one allreduce).
std::pair<int64_t, int64_t> count_range(Strategy& strategy, int64_t local);

// Compares every rank's `local` count (a collective: count_range, and when
// they differ an allgather): "" when all are equal and known, else the
// counts, "rank 0: 3, rank 1: 5" (a count of -1 is unknown: a stream's,
// found at its end, and so never taken as even).
std::string uneven_counts(Strategy& strategy, int64_t local);

// A zero loss whose graph reaches every trainable parameter without reading
// it (sums of no element), so a DDP reducer sees every gradient ready and
// reduces what was accumulated, adding nothing (padding micro-batches).
torch::Tensor zero_loss(const torch::nn::Module& module, torch::Device device);

}  // namespace lt
