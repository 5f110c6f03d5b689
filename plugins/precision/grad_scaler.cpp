#include <lightning_cpp/plugins/precision/grad_scaler.h>

#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/torch_compat.h>

namespace lt {

namespace {

void check_options(const GradScalerOptions& o) {
  LT_CHECK_VALUE(o.init_scale() > 0 && o.init_scale() <= std::numeric_limits<float>::max(),
                 "GradScaler: init_scale must be a number > 0 that float32 holds (the scale is a float32 tensor, ",
                 "as PyTorch's), got ", o.init_scale());
  LT_CHECK_VALUE(o.growth_factor() > 1.0, "GradScaler: growth_factor must be > 1, got ", o.growth_factor());
  LT_CHECK_VALUE(o.backoff_factor() > 0.0 && o.backoff_factor() < 1.0,
                 "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor());
  LT_CHECK_VALUE(o.growth_interval() >= 1, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval());
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  check_options(options_);
  scale_ = torch::full({1}, options_.init_scale(), torch::kFloat);
  growth_tracker_ = torch::zeros({1}, torch::kInt);
  found_inf_ = torch::zeros({1}, torch::kFloat);
}

GradScaler::GradScaler(const GradScaler& other)
    : options_(other.options_),
      scale_(other.scale_.clone()),
      growth_tracker_(other.growth_tracker_.clone()),
      found_inf_(other.found_inf_.clone()),
      reduce_found_inf_(other.reduce_found_inf_) {}

GradScaler& GradScaler::operator=(const GradScaler& other) {
  if (this != &other) *this = GradScaler(other);  // the move assignment, from a copy
  return *this;
}

void GradScaler::to(const torch::Device& device) {
  if (scale_.device() == device) return;
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  found_inf_ = found_inf_.to(device);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) {
  to(loss.device());
  // As PyTorch: a float16 loss is scaled in float32 (the scale is a tensor of one dimension, so it takes part in
  // type promotion); the loss keeps its shape.
  return (loss * scale_).reshape(loss.sizes());
}

bool GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  // One fused call per device and dtype, as PyTorch groups them.
  std::map<std::pair<std::string, c10::ScalarType>, std::vector<torch::Tensor>> groups;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      const torch::Tensor& grad = p.grad();
      if (grad.defined()) groups[{grad.device().str(), grad.scalar_type()}].push_back(grad);
    }
  }
  if (groups.empty() && !reduce_found_inf_) return true;
  if (!groups.empty()) to(groups.begin()->second.front().device());
  // As PyTorch: the reciprocal in double, applied as a float32 tensor.
  const torch::Tensor inv_scale = scale_.to(torch::kDouble).reciprocal().to(torch::kFloat);
  torch::Tensor found = torch::zeros_like(found_inf_);
  for (auto& [key, grads] : groups) {
    if (grads.front().device() == found.device()) {
      compat::amp_unscale_(grads, found, inv_scale);
    } else {  // another device than the first: its own flag, then folded in
      torch::Tensor there = torch::zeros({1}, found.options().device(grads.front().device()));
      compat::amp_unscale_(grads, there, inv_scale.to(there.device()));
      found = torch::maximum(found, there.to(found.device()));
    }
  }
  // Where it is set every rank reduces, one without gradients too: the collective is matched.
  if (reduce_found_inf_) found = reduce_found_inf_(found).to(found_inf_.device());
  found_inf_ = torch::maximum(found_inf_, found);
  return found.item<float>() == 0.0f;  // the one host read: whether the optimizer steps
}

void GradScaler::update() {
  compat::amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor(), options_.backoff_factor(),
                            options_.growth_interval());
  found_inf_.zero_();
}

StateDict GradScaler::state_dict() const {
  StateDict state = new_state_dict();
  state.insert("scale", get_scale());
  state.insert("growth_factor", options_.growth_factor());
  state.insert("backoff_factor", options_.backoff_factor());
  state.insert("growth_interval", options_.growth_interval());
  state.insert("_growth_tracker", growth_tracker());
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
  const torch::Device device = scale_.device();
  scale_ = torch::full({1}, options.init_scale(), torch::TensorOptions(torch::kFloat).device(device));
  growth_tracker_ = torch::full({1}, tracker, torch::TensorOptions(torch::kInt).device(device));
  found_inf_ = torch::zeros({1}, torch::TensorOptions(torch::kFloat).device(device));
}

}  // namespace lt
