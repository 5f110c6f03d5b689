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

#include <cstdint>

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

  // The loss times the scale: what backward runs on.
  torch::Tensor scale(const torch::Tensor& loss) const;
  // Divides the gradients of `optimizer`'s parameters by the scale; returns
  // whether they are all finite (false: skip this step).
  bool unscale(torch::optim::Optimizer& optimizer);
  // After each step, taken or skipped: backs off if an unscale since the last
  // update found a non-finite gradient, else counts toward growth.
  void update();

  double get_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}, as PyTorch's.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  bool found_inf_ = false;
};

}  // namespace lt
