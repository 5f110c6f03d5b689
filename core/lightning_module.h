#pragma once
// lt::LightningModule: a torch::nn::Module that also says how it trains.
// Subclass it (as `FooImpl` plus TORCH_MODULE(Foo) if you like holders),
// implement training_step and configure_optimizers, and hand it to a Trainer.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/result_collection.h>
#include <lightning_cpp/core/types.h>

namespace lt {

class Strategy;
struct RunState;

struct OptimizerConfig {
  OptimizerConfig() = default;
  // Implicit on purpose: `return std::make_shared<torch::optim::SGD>(...);`
  template <typename Opt, typename = std::enable_if_t<std::is_base_of_v<torch::optim::Optimizer, Opt>>>
  OptimizerConfig(std::shared_ptr<Opt> optimizer,  // NOLINT
                  std::shared_ptr<LRScheduler> lr_scheduler = nullptr, Interval interval = Interval::kEpoch,
                  int64_t frequency = 1)
      : optimizer(std::move(optimizer)),
        lr_scheduler(std::move(lr_scheduler)),
        interval(interval),
        frequency(frequency) {}
  // Several optimizers (Lightning's `return [opt_g, opt_d]`), for manual
  // optimization: `return {opt_g, opt_d};`, then optimizer(i) in training_step.
  OptimizerConfig(std::initializer_list<std::shared_ptr<torch::optim::Optimizer>> optimizers)
      : optimizers(optimizers) {}
  explicit OptimizerConfig(std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers)
      : optimizers(std::move(optimizers)) {}
  // The first optimizer; the scheduler, interval and frequency are its own.
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::shared_ptr<LRScheduler> lr_scheduler;
  Interval interval = Interval::kEpoch;
  int64_t frequency = 1;
  // The logged metric a scheduler that follows one (ReduceLROnPlateau) is
  // stepped with, as Lightning's lr_scheduler "monitor"; `strict`: a step
  // without it logged is an error (else a warning, and no step).
  std::string monitor;
  bool strict = true;
  // Every optimizer, the first included (the Trainer fills in whichever of
  // optimizer and optimizers was left empty).
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers;
};

// What the module tells the DDP strategy about collectives it issues itself,
// so uneven inputs under Join can be checked before the first step.
struct ModuleCollectives {
  // Collectives in forward that no CollectiveLayer (core/collective_layer.h)
  // shadows (model-parallel layers...): under Join only with throw mode.
  bool in_forward = false;
  // Collectives issued directly in training_step/validation_step.
  bool in_steps = false;
  // Manual optimization: the module lists what its step does collectively
  // (true = "I issue none beyond manual_backward's gradient sync").
  bool manual_declared = false;
};

class LightningModule;

namespace detail {
// What a Trainer (or Fabric) gives the module for the duration of a run.
struct ModuleRuntime {
  RunState* state = nullptr;
  Strategy* strategy = nullptr;
  ResultCollection* results = nullptr;
  OptimizerConfig* optimizer = nullptr;
};
struct ModuleAccess;  // the Trainer's, Fabric's and the loops' way in (below)
}  // namespace detail

class LightningModule : public torch::nn::Module {
 public:
  LightningModule() = default;
  ~LightningModule() override = default;

  // -- steps ---------------------------------------------------------------
  virtual torch::Tensor training_step(const Batch& batch, int64_t batch_idx) = 0;
  virtual void validation_step(const Batch& /*batch*/, int64_t /*batch_idx*/) {}
  virtual void test_step(const Batch& /*batch*/, int64_t /*batch_idx*/) {}
  virtual torch::Tensor predict_step(const Batch& batch, int64_t batch_idx);
  virtual OptimizerConfig configure_optimizers() = 0;

  // Whether the module implements validation_step / test_step: no loop runs
  // otherwise. Detected where the Trainer sees the module's own type (a
  // std::shared_ptr<MyModule> or a TORCH_MODULE holder; Lightning's
  // is_overridden); through a std::shared_ptr<LightningModule> it cannot see
  // and says true. Override these to decide yourself.
  virtual bool has_validation_step() const { return steps_.validation; }
  virtual bool has_test_step() const { return steps_.test; }

  // -- hooks ---------------------------------------------------------------
  virtual void on_fit_start() {}
  virtual void on_fit_end() {}
  virtual void on_train_start() {}
  virtual void on_train_end() {}
  virtual void on_train_epoch_start() {}
  virtual void on_train_epoch_end() {}
  virtual void on_train_batch_start(const Batch& /*batch*/, int64_t /*batch_idx*/) {}
  virtual void on_train_batch_end(const torch::Tensor& /*loss*/, const Batch& /*batch*/, int64_t /*batch_idx*/) {}
  virtual void on_validation_epoch_start() {}
  virtual void on_validation_epoch_end() {}
  virtual void on_test_epoch_start() {}
  virtual void on_test_epoch_end() {}
  virtual void on_before_backward(const torch::Tensor& /*loss*/) {}
  virtual void on_after_backward() {}
  virtual void on_before_optimizer_step(torch::optim::Optimizer& /*optimizer*/) {}
  virtual void on_before_zero_grad(torch::optim::Optimizer& /*optimizer*/) {}
  virtual void on_save_checkpoint(StateDict& /*checkpoint*/) {}
  virtual void on_load_checkpoint(const StateDict& /*checkpoint*/) {}

  // -- logging ---------------------------------------------------------------
  void log(const std::string& name, const torch::Tensor& value, const LogOptions& options = {});
  void log(const std::string& name, double value, const LogOptions& options = {});

  // -- run information (valid while a Trainer runs this module) --------------
  int64_t current_epoch() const;
  int64_t global_step() const;
  int64_t global_rank() const;
  int64_t world_size() const;
  torch::Device device() const;

  // -- manual optimization ---------------------------------------------------
  bool automatic_optimization() const { return automatic_optimization_; }
  void set_automatic_optimization(bool automatic) { automatic_optimization_ = automatic; }
  // The index-th optimizer configure_optimizers returned (Lightning's self.optimizers()[index]).
  torch::optim::Optimizer& optimizer(size_t index = 0);
  size_t num_optimizers() const;
  LRScheduler* lr_scheduler();
  // Backward through the strategy (DDP gradient sync) and the precision (16-mixed
  // scales the loss); use instead of loss.backward().
  void manual_backward(const torch::Tensor& loss);
  // Steps optimizer(index) through the strategy and counts a global step (as
  // Lightning: two optimizers stepped per batch count two). Under 16-mixed the
  // gradients are unscaled first, and a step with a non-finite one is skipped.
  void optimizer_step(size_t index = 0);
  // Lightning's toggle_optimizer: only optimizer(index)'s parameters require
  // gradients until untoggle_optimizer(index) gives the others theirs back,
  // so a backward for one optimizer leaves the others' gradients alone.
  void toggle_optimizer(size_t index);
  void untoggle_optimizer(size_t index);

  // -- declarations ------------------------------------------------------------
  HParams& hparams() { return hparams_; }
  const HParams& hparams() const { return hparams_; }
  ModuleCollectives& collectives() { return collectives_; }
  const ModuleCollectives& collectives() const { return collectives_; }

 private:
  friend struct detail::ModuleAccess;
  detail::ModuleRuntime runtime_;
  struct Steps {
    bool validation = true;
    bool test = true;
  } steps_;
  HParams hparams_;
  ModuleCollectives collectives_;
  bool automatic_optimization_ = true;
  // requires_grad of the parameters toggle_optimizer turned off.
  std::vector<std::pair<torch::Tensor, bool>> untoggled_;
};

namespace detail {

// Whether M declares its own `name` step rather than LightningModule's: false
// only where &M::name is LightningModule's; an overload set or a private
// override (not addressable here) counts as declared.
#define LT_DECLARES_STEP(name)                                                                           \
  template <typename M, typename = void>                                                                 \
  struct declares_##name : std::true_type {};                                                            \
  template <typename M>                                                                                  \
  struct declares_##name<M, std::void_t<decltype(&M::name)>>                                             \
      : std::bool_constant<!std::is_same_v<decltype(&M::name), decltype(&LightningModule::name)>> {};
LT_DECLARES_STEP(validation_step)
LT_DECLARES_STEP(test_step)
#undef LT_DECLARES_STEP

struct ModuleAccess {
  static void attach(LightningModule& module, const ModuleRuntime& runtime) { module.runtime_ = runtime; }
  static void detach(LightningModule& module) { module.runtime_ = ModuleRuntime{}; }
  static const ModuleRuntime& runtime(const LightningModule& module) { return module.runtime_; }
  static void use_results(LightningModule& module, ResultCollection* results) { module.runtime_.results = results; }
  // Records which steps M implements, where M is the object's own type (a
  // pointer to a base class says nothing of the object's overrides).
  template <typename M>
  static std::shared_ptr<LightningModule> seen(const std::shared_ptr<M>& module) {
    static_assert(std::is_base_of_v<LightningModule, M>, "the Trainer takes a lt::LightningModule");
    if (module != nullptr && typeid(*module) == typeid(M)) {
      module->LightningModule::steps_ = {declares_validation_step<M>::value, declares_test_step<M>::value};
    }
    return module;
  }
};

}  // namespace detail

}  // namespace lt
