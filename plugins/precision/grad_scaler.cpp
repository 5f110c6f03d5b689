#include <lightning_cpp/plugins/precision/grad_scaler.h>

#include <cmath>
#include <vector>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

void check_options(const GradScalerOptions& o) {
  LT_CHECK_VALUE(o.init_scale() > 0 && std::isfinite(o.init_scale()), "GradScaler: init_scale must be a finite ",
                 "number > 0, got ", o.init_scale());
  LT_CHECK_VALUE(o.growth_factor() > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor());
  LT_CHECK_VALUE(o.backoff_factor() > 0.0 && o.backoff_factor() < 1.0,
                 "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor());
  LT_CHECK_VALUE(o.growth_interval() >= 1, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval());
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale()) {
  check_options(options_);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const { return loss * scale_; }

bool GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  // As PyTorch: the reciprocal in double, applied in the gradients' dtype.
  const double inv_scale = 1.0 / scale_;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> finite;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      auto& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      grad.mul_(inv_scale);
      finite.push_back(torch::isfinite(grad).all());
    }
  }
  const bool all_finite = finite.empty() || torch::stack(finite).all().item<bool>();
  found_inf_ = found_inf_ || !all_finite;
  return all_finite;
}

void GradScaler::update() {
  // PyTorch's _amp_update_scale_: back off on a non-finite gradient, grow
  // after growth_interval clean steps, never to an infinite scale.
  if (found_inf_) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval()) {
    if (std::isfinite(scale_ * options_.growth_factor())) scale_ *= options_.growth_factor();
    growth_tracker_ = 0;
  }
  found_inf_ = false;
}

StateDict GradScaler::state_dict() const {
  StateDict state = new_state_dict();
  state.insert("scale", scale_);
  state.insert("growth_factor", options_.growth_factor());
  state.insert("backoff_factor", options_.backoff_factor());
  state.insert("growth_interval", options_.growth_interval());
  state.insert("_growth_tracker", growth_tracker_);
  return state;
}

void GradScaler::load_state_dict(const StateDict& state) {
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    LT_CHECK_VALUE(state.contains(key), "GradScaler state: missing '", key, "'");
  }
  GradScalerOptions options = options_;
  options.init_scale(state.at("scale").toDouble())
      .growth_factor(state.at("growth_factor").toDouble())
      .backoff_factor(state.at("backoff_factor").toDouble())
      .growth_interval(state.at("growth_interval").toInt());
  check_options(options);
  const int64_t tracker = state.at("_growth_tracker").toInt();
  LT_CHECK_VALUE(tracker >= 0 && tracker < options.growth_interval(), "GradScaler state: _growth_tracker ", tracker,
                 " outside [0, growth_interval ", options.growth_interval(), ")");
  options_ = options;
  scale_ = options.init_scale();
  growth_tracker_ = tracker;
  found_inf_ = false;
}

}  // namespace lt
