#pragma once
// Fabric: the parallel foundation for a training loop the user keeps
// (Lightning's lightning.fabric.Fabric), beside the Trainer on the same
// strategies, launchers and checkpoint format:
//
//   lt::Fabric fabric(lt::FabricOptions().strategy("ddp").devices(2));
//   fabric.launch([](lt::Fabric& f) {
//     auto model = std::make_shared<Net>();
//     auto optimizer = f.setup(model, [](torch::nn::Module& m) -> lt::OptimizerConfig {
//       return std::make_shared<torch::optim::SGD>(m.parameters(), torch::optim::SGDOptions(0.1));
//     }).optimizer;
//     auto loader = make_my_loader(f.global_rank());  // this rank's own data, of any size
//     f.setup_dataloader(*loader, /*use_distributed_sampler=*/false);
//     auto step = [&] { optimizer->step(); optimizer->zero_grad(); };
//     while (f.current_epoch() < 3) {
//       for (lt::Batch& batch : f.join(*loader, step)) {
//         f.backward(torch::mse_loss(model->forward(batch.data), batch.target));
//       }
//     }
//     f.save("model.ckpt");
//   });
//
// The ranks may have different numbers of batches: join() runs the Trainer's
// one context of no_sync accumulation and lockstep Join (join_epoch.h).
// Everything collective (setup, setup_dataloader, join, the collectives,
// save, load) is called by every rank in the same order.

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/seed.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/core/types.h>
#include <lightning_cpp/fabric/join_epoch.h>

namespace lt {

class DataLoader;

struct FabricOptions {
  // cpu; cuda; auto = cuda where available, else cpu.
  TORCH_ARG(std::string, accelerator) = "cpu";
  // Processes per node: > 1 with no cluster launcher spawns them (each runs main() again).
  TORCH_ARG(int64_t, devices) = 1;
  TORCH_ARG(int64_t, num_nodes) = 1;
  // 32-true, 64-true, bf16-mixed, 16-mixed (plugins/precision/precision.h).
  TORCH_ARG(std::string, precision) = "32-true";
  // What log_dict writes to (rank 0 only).
  TORCH_ARG(std::vector<std::shared_ptr<Logger>>, loggers) = {};
  // The strategy as an object (lt::DDPStrategy with its options); unset: by name.
  TORCH_ARG(std::shared_ptr<Strategy>, strategy) = nullptr;

 public:
  // By registered name with its default init args ("auto": ddp for several
  // processes, else single_device):  lt::FabricOptions().strategy("ddp")
  FabricOptions& strategy(const char* name) {
    strategy_name_ = name != nullptr ? name : "auto";
    return *this;
  }
  FabricOptions& strategy(const std::string& name) { return strategy(name.c_str()); }
  const std::string& strategy_name() const { return strategy_name_; }

 private:
  std::string strategy_name_ = "auto";
};

class Fabric {
 public:
  // Makes the strategy and the precision; starts nothing (launch does).
  explicit Fabric(FabricOptions options = FabricOptions());
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // This process's part of the run, then fn(*this). With devices > 1 and no
  // cluster launcher (torchrun, srun, mpirun) this process supervises that
  // many workers, each running main() again, and exits with their status:
  // launch never returns there. Under fn a failure on any rank, or a rank
  // that hangs in a collective, is reported on every rank (the collective
  // watchdog); launch then rethrows it. SIGTERM and SIGINT are caught while
  // fn runs: the current epoch stops after an optimizer step the ranks agree
  // on (JoinEpoch::stopped, interrupted()), so that fn can save and return.
  void launch(const std::function<void(Fabric&)>& fn);

  // -- set-up (inside launch) --------------------------------------------------------
  // What to train with: given the module (its parameters, as the strategy
  // holds them), its optimizer and scheduler (lambda returning
  // std::make_shared<torch::optim::Adam>(...) converts).
  using OptimizerFactory = std::function<OptimizerConfig(torch::nn::Module& module)>;
  // Moves the module to the device (in the precision's dtype), wraps it in
  // the strategy's gradient sync (DDP: broadcasts rank 0's parameters), then
  // makes the optimizer: make_optimizer, or for a LightningModule given none,
  // its configure_optimizers(). One module per Fabric (put several models in
  // one torch::nn::Module). Returns the optimizers (empty for none).
  OptimizerConfig setup(std::shared_ptr<torch::nn::Module> module, OptimizerFactory make_optimizer = nullptr);
  template <typename M>
  OptimizerConfig setup(const torch::nn::ModuleHolder<M>& module, OptimizerFactory make_optimizer = nullptr) {
    return setup(std::static_pointer_cast<torch::nn::Module>(module.ptr()), std::move(make_optimizer));
  }
  // For the strategy: use_distributed_sampler true gives each rank its shard
  // of the dataset (uneven_inputs says how the shards are evened out); false
  // keeps the rank's own data as given, of any size.
  void setup_dataloader(DataLoader& loader, bool use_distributed_sampler = true);

  // -- the loop ------------------------------------------------------------------------
  // The current epoch over `loader`, in the strategy's no_sync + Join
  // context (join_epoch.h); `step` is the optimizer step (clip, step, the
  // scheduler, zero_grad) that every rank takes at each window's end.
  JoinEpoch join(DataLoader& loader, std::function<void()> step, JoinOptions options = JoinOptions());
  // The loss's backward through the precision (16-mixed: scaled) and the
  // strategy (DDP: the gradient reduction at a window's end). Inside join():
  // once per micro-batch, of loss / accumulate_grad_batches.
  void backward(const torch::Tensor& loss);
  // Clips the gradients of the optimizer's parameters by their global norm
  // (or by value). join()'s step runs on unscaled gradients (16-mixed).
  void clip_gradients(torch::optim::Optimizer& optimizer, double max_value,
                      GradientClipAlgorithm algorithm = GradientClipAlgorithm::kNorm);

  // -- collectives: every rank at the same point, none inside join()'s body ----------
  torch::Tensor all_reduce(const torch::Tensor& tensor, ReduceOp op = ReduceOp::kMean);
  // Every rank's tensor (the same shape), stacked along a new first dimension.
  torch::Tensor all_gather(const torch::Tensor& tensor);
  torch::Tensor broadcast(const torch::Tensor& tensor, int64_t src = 0);
  void barrier();

  // -- ranks -------------------------------------------------------------------------------
  int64_t global_rank() const { return strategy_->global_rank(); }
  int64_t local_rank() const { return strategy_->local_rank(); }
  int64_t world_size() const { return strategy_->world_size(); }
  bool is_global_zero() const { return strategy_->is_global_zero(); }
  torch::Device device() const { return strategy_->root_device(); }
  Strategy& strategy() { return *strategy_; }
  // Prints a line on global rank 0 only.
  template <typename... Args>
  void print(const Args&... args) const {
    if (is_global_zero()) std::cout << c10::str(args...) << std::endl;
  }
  static void seed_everything(uint64_t seed) { lt::seed_everything(seed); }

  // -- progress, checkpoints, logging ---------------------------------------------------
  // The epoch the next join() runs (after a load: where the checkpoint left off).
  int64_t current_epoch() const { return state_.current_epoch + (state_.epoch_ended ? 1 : 0); }
  // Optimizer steps taken (the steps join() ran).
  int64_t global_step() const { return state_.global_step; }
  // The signal that stopped the last epoch early (JoinEpoch::stopped), or 0.
  int interrupted() const { return state_.interrupted_by; }
  // A checkpoint in the Trainer's format (core/training_state.h): the module,
  // the optimizers and the scheduler from setup, the epoch, global_step, the
  // RNG state, and `extra`'s entries; Trainer::fit(..., ckpt_path) resumes
  // from it, and load() from the Trainer's. Between join() epochs (not inside
  // one's loop); rank 0 writes, every rank waits for the file.
  void save(const std::string& path, const StateDict& extra = new_state_dict());
  // Restores what save() wrote (or a Trainer's checkpoint) into what setup
  // made, with the epoch, the step (a mid-epoch Trainer checkpoint: the next
  // join() starts where it left the epoch) and the RNG state. Returns the
  // whole checkpoint, `extra`'s entries included.
  StateDict load(const std::string& path);
  // To every logger, on rank 0 (step -1: global_step()).
  void log_dict(const std::map<std::string, double>& metrics, int64_t step = -1);
  void log(const std::string& name, double value, int64_t step = -1) { log_dict({{name, value}}, step); }

 private:
  friend class JoinEpoch;
  void check_launched(const char* what) const;
  void teardown(const std::string& status);

  FabricOptions options_;
  TrainerOptions trainer_options_;  // what the strategy reads (devices, accelerator...)
  std::shared_ptr<Strategy> strategy_;
  RunState state_;
  std::shared_ptr<LightningModule> module_;  // the user's, or a LightningModule holding its children
  OptimizerConfig optim_;
  JoinEpoch* epoch_ = nullptr;  // the join() epoch being iterated
  bool launched_ = false;
  bool running_ = false;  // inside launch's fn
};

}  // namespace lt
