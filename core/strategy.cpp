#include <lightning_cpp/core/strategy.h>

#include <algorithm>
#include <cmath>

#include <c10/core/impl/VirtualGuardImpl.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/fused_optimizer.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/state_dict.h>

namespace lt {

void set_current_device(const torch::Device& device) {
  // Through the device guard's registry: no CUDA header, and a LibTorch without CUDA never gets here.
  if (device.is_cuda() && device.has_index()) c10::impl::VirtualGuardImpl(device.type()).setDevice(device);
}

void Strategy::setup(LightningModule& module) {
  set_current_device(root_device());
  module.to(root_device());
}

void Strategy::set_precision(std::shared_ptr<Precision> precision) {
  LT_CHECK(precision != nullptr, "Strategy::set_precision: null");
  precision_ = std::move(precision);
}

Batch Strategy::batch_to_device(Batch batch) const {
  const torch::Device device = root_device();
  // From pinned memory (DataLoaderOptions::pin_memory) the copy is asynchronous: the host goes on while it runs on
  // the device's current stream, ahead of the step's kernels, and the caching host allocator keeps the pinned
  // block until it is done.
  return batch.map(
      [&](const torch::Tensor& t) { return t.to(device, /*non_blocking=*/device.is_cuda() && t.is_pinned()); });
}

torch::Tensor Strategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  before_forward(module);
  torch::Tensor out = module.training_step(batch, batch_idx);
  after_forward(module, out);
  return out;
}

void Strategy::backward(const torch::Tensor& loss, LightningModule& /*module*/) { loss.backward(); }

void Strategy::optimizer_step(torch::optim::Optimizer& optimizer) {
  // optimizer.step(), fused where it can be (bitwise the same)
  run_optimizer_step([&optimizer] { step_optimizer(optimizer); });
}

void Strategy::run_optimizer_step(const std::function<void()>& step) {
  release_gradients();
  step();
  after_optimizer_step();
}

TrainingEpochContext::TrainingEpochContext(EpochPlan plan) : plan_(plan) {
  LT_INTERNAL_ASSERT(plan_.state != nullptr && plan_.steps != nullptr, "an EpochPlan without its run state or steps");
}

bool TrainingEpochContext::max_steps_reached() const {
  return plan_.max_steps >= 0 && plan_.state->global_step >= plan_.max_steps;
}

bool TrainingEpochContext::stops_after(bool window_end) {
  return max_steps_reached() || plan_.state->should_stop || (window_end && stop_requested(interrupt_signal() != 0));
}

std::unique_ptr<TrainingEpochContext> Strategy::training_epoch_context(LightningModule& /*module*/,
                                                                       const EpochPlan& plan) {
  return std::make_unique<TrainingEpochContext>(plan);
}

torch::Tensor zero_loss(const torch::nn::Module& module, torch::Device device) {
  torch::Tensor zero = torch::zeros({}, device);
  for (const auto& p : module.parameters()) {
    // The sum of none of its elements: reaches the parameter in the graph
    // without reading it (a sharded parameter's bytes may be freed).
    if (p.requires_grad()) zero = zero + (p.dim() == 0 ? p.reshape({1}) : p).narrow(0, 0, 0).sum();
  }
  return zero;
}

OptimizerConfig Strategy::setup_optimizers(LightningModule& module) {
  OptimizerConfig config = module.configure_optimizers();
  if (!config.optimizer && !config.optimizers.empty()) config.optimizer = config.optimizers.front();
  if (config.optimizers.empty() && config.optimizer) config.optimizers = {config.optimizer};
  LT_CHECK(config.optimizer != nullptr, "configure_optimizers() returned no optimizer");
  for (size_t i = 0; i < config.optimizers.size(); ++i) {
    LT_CHECK_VALUE(config.optimizers[i] != nullptr, "configure_optimizers(): optimizer ", i, " is null");
  }
  LT_CHECK_VALUE(config.optimizers.size() == 1 || !module.automatic_optimization(), "configure_optimizers() ",
                 "returned ", config.optimizers.size(), " optimizers: training with several optimizers needs manual ",
                 "optimization (set_automatic_optimization(false), then optimizer(i) in training_step), as Lightning");
  config.frequency = std::max<int64_t>(config.frequency, 1);
  LT_CHECK_VALUE(config.lr_scheduler == nullptr || !config.lr_scheduler->monitors_metric() || !config.monitor.empty(),
                 "configure_optimizers(): the scheduler follows a metric (ReduceLROnPlateau): set the ",
                 "OptimizerConfig's monitor to the logged metric it follows (Lightning's lr_scheduler \"monitor\"), ",
                 "e.g. val_loss");
  return config;
}

c10::Dict<std::string, torch::Tensor> Strategy::module_state(LightningModule& module) {
  return module_state_dict(module);
}

void Strategy::load_module_state(LightningModule& module, const c10::Dict<std::string, torch::Tensor>& state) {
  load_module_state_dict(module, state);
}

c10::IValue Strategy::optimizer_state(torch::optim::Optimizer& optimizer) { return optimizer_state_dict(optimizer); }

void Strategy::load_optimizer_state(torch::optim::Optimizer& optimizer, const c10::IValue& state,
                                    const std::string& where) {
  load_optimizer_state_dict(optimizer, state, where);
}

void Strategy::clip_gradients(torch::optim::Optimizer& optimizer, double clip_val, GradientClipAlgorithm algorithm) {
  if (clip_val <= 0.0) return;
  std::vector<torch::Tensor> params;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) params.push_back(p);
    }
  }
  if (algorithm == GradientClipAlgorithm::kNorm) {
    torch::nn::utils::clip_grad_norm_(params, clip_val);
  } else {
    torch::nn::utils::clip_grad_value_(params, clip_val);
  }
}

double gradient_norm_of(const std::vector<torch::Tensor>& grads, double norm_type,
                        const std::function<double(double, bool)>& combine) {
  LT_CHECK_VALUE(norm_type > 0.0, "gradient norm: norm_type must be > 0 (or infinity), got ", norm_type);
  const bool inf = std::isinf(norm_type);
  double partial = 0.0;  // the largest |g| (inf) or the sum of |g|^p
  {
    torch::NoGradGuard no_grad;
    for (const auto& g : grads) {
      const torch::Tensor a = g.detach().abs().to(torch::kDouble);
      partial = inf ? std::max(partial, a.max().item<double>()) : partial + a.pow(norm_type).sum().item<double>();
    }
  }
  const double total = combine ? combine(partial, inf) : partial;
  return inf ? total : std::pow(total, 1.0 / norm_type);
}

double Strategy::gradient_norm(torch::optim::Optimizer& optimizer, double norm_type) {
  std::vector<torch::Tensor> grads;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      if (p.grad().defined()) grads.push_back(p.grad());
    }
  }
  return gradient_norm_of(grads, norm_type, nullptr);
}

bool Strategy::all_finite(const std::vector<torch::Tensor>& tensors) {
  // A sum is finite when all its terms are: a NaN or an infinity makes it
  // NaN or infinite (a finite sum that overflows is a false alarm).
  std::vector<torch::Tensor> sums;
  for (const auto& t : tensors) sums.push_back((t.numel() == 1 ? t.reshape({}) : t.sum()).to(torch::kFloat));
  return sums.empty() || std::isfinite(torch::stack(sums).sum().item<float>());
}

void Strategy::set_checkpoint_io(std::shared_ptr<CheckpointIO> checkpoint_io) {
  LT_CHECK(checkpoint_io != nullptr, "Strategy::set_checkpoint_io: null");
  checkpoint_io_ = std::move(checkpoint_io);
}

CheckpointIO& Strategy::checkpoint_io() const {
  LT_CHECK(checkpoint_io_ != nullptr, "strategy ", name(), " has no CheckpointIO: the Trainer and Fabric give it ",
           "lt::TorchCheckpointIO; outside them call set_checkpoint_io (plugins/io/torch_plugin.h)");
  return *checkpoint_io_;
}

void Strategy::save_checkpoint(const c10::IValue& checkpoint, const std::string& path) {
  CheckpointIO& io = checkpoint_io();  // on every rank: none throws alone and leaves the others at the barrier
  if (is_global_zero()) io.save_checkpoint(checkpoint, path);
  barrier("save_checkpoint");
}

c10::IValue Strategy::load_checkpoint(const std::string& path) { return checkpoint_io().load_checkpoint(path); }

void Strategy::remove_checkpoint(const std::string& path) {
  if (is_global_zero()) checkpoint_io().remove_checkpoint(path);
}

torch::Tensor Strategy::reduce(const torch::Tensor& tensor, ReduceOp /*op*/) { return tensor; }

torch::Tensor Strategy::all_gather(const torch::Tensor& tensor) { return tensor.unsqueeze(0); }

std::vector<std::string> Strategy::all_gather_bytes(const std::string& bytes) { return {bytes}; }

torch::Tensor Strategy::broadcast(const torch::Tensor& tensor, int64_t /*src*/) { return tensor; }

bool Strategy::reduce_boolean_decision(bool decision, bool /*all*/) { return decision; }

std::pair<int64_t, int64_t> count_range(Strategy& strategy, int64_t local) {
  const torch::Tensor extremes = strategy.reduce(torch::tensor({local, -local}, torch::kLong), ReduceOp::kMax);
  return {-extremes[1].item<int64_t>(), extremes[0].item<int64_t>()};
}

std::string uneven_counts(Strategy& strategy, int64_t local) {
  const auto [shortest, longest] = count_range(strategy, local);
  if (shortest == longest && shortest >= 0) return {};
  // Every rank learned the same: all gather the counts to name them.
  const torch::Tensor counts = strategy.all_gather(torch::tensor({local}, torch::kLong)).flatten();
  std::string listing;
  for (int64_t r = 0; r < counts.size(0); ++r) {
    const int64_t count = counts[r].item<int64_t>();
    listing +=
        c10::str(r == 0 ? "" : ", ", "rank ", r, ": ", count >= 0 ? std::to_string(count) : "unknown (a stream)");
  }
  return listing;
}

}  // namespace lt
