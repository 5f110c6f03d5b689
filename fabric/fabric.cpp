#include <lightning_cpp/fabric/fabric.h>

#include <optional>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/training_state.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/precision/precision.h>
#include <lightning_cpp/plugins/strategies/registration.h>

namespace lt {

namespace {

// A plain torch::nn::Module as the strategies take it: a LightningModule
// whose children, parameters and buffers are the user's own (the same
// tensors, under the same names, so checkpoints name them as the user's
// module does), and whose optimizers are the user's factory's.
class FabricModule : public LightningModule {
 public:
  FabricModule(std::shared_ptr<torch::nn::Module> module, Fabric::OptimizerFactory make_optimizer)
      : module_(std::move(module)), make_optimizer_(std::move(make_optimizer)) {
    for (const auto& child : module_->named_children()) register_module(child.key(), child.value());
    for (const auto& p : module_->named_parameters(/*recurse=*/false)) {
      register_parameter(p.key(), p.value(), p.value().requires_grad());
    }
    for (const auto& b : module_->named_buffers(/*recurse=*/false)) register_buffer(b.key(), b.value());
  }
  torch::Tensor training_step(const Batch& /*batch*/, int64_t /*batch_idx*/) override {
    throw Error("Fabric: a module set up by Fabric has no training_step: the loop calls its forward");
  }
  OptimizerConfig configure_optimizers() override { return make_optimizer_(*module_); }
  bool has_validation_step() const override { return false; }
  bool has_test_step() const override { return false; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  Fabric::OptimizerFactory make_optimizer_;
};

}  // namespace

Fabric::Fabric(FabricOptions options) : options_(std::move(options)) {
  trainer_options_.accelerator(options_.accelerator())
      .devices(options_.devices())
      .num_nodes(options_.num_nodes())
      .precision(options_.precision())
      .strategy(options_.strategy_name());
  if (options_.strategy()) trainer_options_.strategy(options_.strategy());
  trainer_options_.validate();
  strategy_ = options_.strategy() ? options_.strategy() : make_strategy(trainer_options_);
  strategy_->set_precision(make_precision(options_.precision(), trainer_options_.device_type()));
  if (!strategy_->has_checkpoint_io()) strategy_->set_checkpoint_io(std::make_shared<TorchCheckpointIO>());
}

Fabric::~Fabric() = default;

void Fabric::check_launched(const char* what) const {
  LT_CHECK(running_, "Fabric::", what, ": call it inside fabric.launch([](lt::Fabric& f) { ... })");
}

void Fabric::launch(const std::function<void(Fabric&)>& fn) {
  LT_CHECK(!launched_, "Fabric::launch: called twice; launch once and run the whole loop inside");
  LT_CHECK(fn != nullptr, "Fabric::launch: the function is empty");
  launched_ = true;
  // A local spawn's supervisor never returns from here; it forwards signals itself.
  strategy_->setup_environment(trainer_options_);
  SignalGuard signals;
  state_.stage = Stage::kTrain;
  strategy_->on_run_start(state_);  // from here a failure on one rank is reported on every rank
  running_ = true;
  try {
    fn(*this);
    strategy_->on_train_end();  // every rank waits for the others (a failure is reported)
  } catch (const std::exception& caught) {
    const std::exception_ptr error = strategy_->on_exception(caught);
    teardown("failed");
    std::rethrow_exception(error);
  }
  teardown("success");
}

void Fabric::teardown(const std::string& status) {
  running_ = false;
  strategy_->teardown();
  if (module_) detail::ModuleAccess::detach(*module_);
  state_.stage = Stage::kNone;
  if (is_global_zero()) {
    for (const auto& logger : options_.loggers()) {
      logger->save();
      logger->finalize(status);
    }
  }
}

OptimizerConfig Fabric::setup(std::shared_ptr<torch::nn::Module> module, OptimizerFactory make_optimizer) {
  check_launched("setup");
  LT_CHECK(module != nullptr, "Fabric::setup: the module is null");
  LT_CHECK(module_ == nullptr, "Fabric::setup: called a second time; Fabric trains one module (the strategy wraps "
                               "one in its gradient sync): put your models in one torch::nn::Module");
  auto lightning = std::dynamic_pointer_cast<LightningModule>(module);
  LT_CHECK_VALUE(lightning == nullptr || make_optimizer == nullptr, "Fabric::setup: a LightningModule brings its ",
                 "optimizers (configure_optimizers()); give no optimizer factory with it");
  if (lightning != nullptr) {
    module_ = lightning;
  } else {
    module_ = std::make_shared<FabricModule>(module, make_optimizer ? make_optimizer : [](torch::nn::Module&) {
      return OptimizerConfig();
    });
  }
  detail::ModuleAccess::attach(*module_, {&state_, strategy_.get(), nullptr, &optim_});
  strategy_->precision().convert_module(*module_);
  strategy_->setup(*module_);
  if (lightning == nullptr && make_optimizer == nullptr) return optim_;  // a module to evaluate
  optim_ = strategy_->setup_optimizers(*module_);
  return optim_;
}

void Fabric::setup_dataloader(DataLoader& loader, bool use_distributed_sampler) {
  check_launched("setup_dataloader");
  TrainerOptions options = trainer_options_;
  options.use_distributed_sampler(use_distributed_sampler);
  strategy_->process_dataloader(loader, Stage::kTrain, options);
}

JoinEpoch Fabric::join(DataLoader& loader, std::function<void()> step, JoinOptions options) {
  check_launched("join");
  LT_CHECK(module_ != nullptr, "Fabric::join: no module; call setup(module, make_optimizer) first");
  LT_CHECK(epoch_ == nullptr, "Fabric::join: an epoch is running; finish its loop first");
  LT_CHECK(step != nullptr, "Fabric::join: the step is empty (give the optimizer step: step and zero_grad)");
  LT_CHECK_VALUE(options.accumulate_grad_batches() >= 1, "Fabric::join: accumulate_grad_batches must be >= 1, got ",
                 options.accumulate_grad_batches());
  return JoinEpoch(*this, loader, std::move(step), options);
}

void Fabric::backward(const torch::Tensor& loss) {
  LT_CHECK(loss.defined() && loss.numel() == 1, "Fabric::backward: the loss must be a scalar; got ",
           loss.defined() ? c10::str("shape ", loss.sizes()) : std::string("an undefined tensor"));
  if (epoch_ != nullptr) {
    epoch_->backward(loss);
    return;
  }
  check_launched("backward");
  LT_CHECK(module_ != nullptr, "Fabric::backward: no module; call setup first");
  strategy_->after_forward(*module_, loss);
  strategy_->backward(strategy_->precision().pre_backward(loss), *module_);
}

void Fabric::clip_gradients(torch::optim::Optimizer& optimizer, double max_value, GradientClipAlgorithm algorithm) {
  LT_CHECK_VALUE(max_value > 0, "Fabric::clip_gradients: the maximum must be > 0, got ", max_value);
  strategy_->clip_gradients(optimizer, max_value, algorithm);
}

torch::Tensor Fabric::all_reduce(const torch::Tensor& tensor, ReduceOp op) { return strategy_->reduce(tensor, op); }

torch::Tensor Fabric::all_gather(const torch::Tensor& tensor) { return strategy_->all_gather(tensor); }

torch::Tensor Fabric::broadcast(const torch::Tensor& tensor, int64_t src) { return strategy_->broadcast(tensor, src); }

void Fabric::barrier() { strategy_->barrier("Fabric::barrier"); }

void Fabric::save(const std::string& path, const StateDict& extra) {
  check_launched("save");
  LT_CHECK(module_ != nullptr, "Fabric::save: no module; call setup first");
  LT_CHECK(epoch_ == nullptr, "Fabric::save: inside a join() epoch's loop (rank ", global_rank(), ", batch ",
           state_.batch_idx, "): save between epochs, where every rank holds the same whole steps");
  // The Trainer's part of a checkpoint (core/training_state.h), so that either resumes the other.
  StateDict ckpt = new_state_dict();
  for (const auto& entry : extra) ckpt.insert(entry.key(), entry.value());
  dump_training_state(ckpt, *strategy_, *module_, optim_, state_);  // the user steps the scheduler
  strategy_->save_checkpoint(ckpt, path);
}

StateDict Fabric::load(const std::string& path) {
  check_launched("load");
  LT_CHECK(module_ != nullptr, "Fabric::load: no module; call setup first (load restores into what it made)");
  LT_CHECK(epoch_ == nullptr, "Fabric::load: inside a join() epoch's loop; load between epochs");
  return restore_training_state(strategy_->load_checkpoint(path), path, *strategy_, *module_, optim_, state_);
}

void Fabric::log_dict(const std::map<std::string, double>& metrics, int64_t step) {
  if (!is_global_zero()) return;
  for (const auto& logger : options_.loggers()) logger->log_metrics(metrics, step < 0 ? state_.global_step : step);
}

}  // namespace lt
