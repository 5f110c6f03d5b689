#pragma once
// GradScaler: PyTorch's torch.cuda.amp.GradScaler, the loss scaling that
// 16-mixed needs (float16 gradients underflow without it). The loss is
// multiplied by the scale before backward; before the optimizer step the
// gradients are divided by it again and checked: a step with a non-finite
// gradient is skipped and the scale backs off; growth_interval steps in a row
// without one grow it. Its state_dict has PyTorch's keys, so a checkpoint
// holds what Python's scaler.state_dict() would.
//
// The scale stays a power of two when init_scale and the factors are (the
// defaults): scaling then changes no rounding, and a run whose steps are all
// taken equals the unscaled run bitwise (what the tests check on the CPU).
//
// As PyTorch's, its state lives on the gradients' device (a float32 scale, an
// int32 growth tracker, a found-inf flag), unscaling is one fused kernel per
// device and dtype (_amp_foreach_non_finite_check_and_unscale_) and the
// update another (_amp_update_scale_): no value is read back to the host
// except once per unscale, the verdict that decides whether the optimizer
// steps (PyTorch's GradScaler.step reads it too). Where ranks hold different
// gradients (sharded), set_found_inf_reduction makes that verdict every
// rank's (PyTorch's ShardedGradScaler).

#include <cstdint>
#include <functional>

#include <torch/torch.h>

#include <lightning_cpp/core/types.h>

namespace lt {

struct GradScalerOptions {
  TORCH_ARG(double, init_scale) = 65536.0;  // 2^16, as PyTorch
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

class GradScaler {
 public:
  // Checks the options (init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1).
  explicit GradScaler(GradScalerOptions options = {});
  // A copy has its own state (the tensors cloned), as a value should.
  GradScaler(const GradScaler& other);
  GradScaler& operator=(const GradScaler& other);
  GradScaler(GradScaler&&) = default;
  GradScaler& operator=(GradScaler&&) = default;

  // The loss times the scale: what backward runs on. The scale moves to the
  // loss's device the first time.
  torch::Tensor scale(const torch::Tensor& loss);
  // Divides the gradients of `optimizer`'s parameters by the scale; returns
  // whether they are all finite (false: skip this step), on every rank alike
  // where a reduction is set.
  bool unscale(torch::optim::Optimizer& optimizer);
  // After each step, taken or skipped: backs off if an unscale since the last
  // update found a non-finite gradient, else counts toward growth.
  void update();
  // `reduce` takes this rank's found-inf flag and returns the flag of all
  // ranks whose gradients differ from this one's (their maximum).
  void set_found_inf_reduction(std::function<torch::Tensor(const torch::Tensor&)> reduce) {
    reduce_found_inf_ = std::move(reduce);
  }

  // Read back from the device: for logs and checkpoints, not for every step.
  double get_scale() const { return scale_.item<double>(); }
  int64_t growth_tracker() const { return growth_tracker_.item<int64_t>(); }
  // {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}, as PyTorch's.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  // On `device`: the state's tensors move there (once; a no-op after).
  void to(const torch::Device& device);

  GradScalerOptions options_;
  torch::Tensor scale_;           // float32, one element
  torch::Tensor growth_tracker_;  // int32, one element
  torch::Tensor found_inf_;       // float32, one element: 1 where an unscale since the last update found one
  std::function<torch::Tensor(const torch::Tensor&)> reduce_found_inf_;
};

}  // namespace lt
