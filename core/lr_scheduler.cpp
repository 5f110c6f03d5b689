#include <lightning_cpp/core/lr_scheduler.h>

#include <cmath>

#include <lightning_cpp/core/check.h>

namespace lt {

double get_lr(const torch::optim::OptimizerParamGroup& group) {
  return const_cast<torch::optim::OptimizerParamGroup&>(group).options().get_lr();
}

void set_lr(torch::optim::OptimizerParamGroup& group, double lr) { group.options().set_lr(lr); }

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& group : optimizer_.param_groups()) base_lrs_.push_back(get_lr(group));
}

void LRScheduler::step() {
  ++last_epoch_;
  const auto lrs = compute_lrs();
  auto& groups = optimizer_.param_groups();
  LT_INTERNAL_ASSERT(lrs.size() == groups.size(), "LRScheduler: ", lrs.size(), " rates for ", groups.size(),
                     " param groups");
  for (size_t i = 0; i < groups.size(); ++i) set_lr(groups[i], lrs[i]);
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (auto& group : optimizer_.param_groups()) out.push_back(get_lr(group));
  return out;
}

StateDict LRScheduler::state_dict() const {
  StateDict state = new_state_dict();
  state.insert("last_epoch", last_epoch_);
  state.insert("base_lrs", c10::IValue(base_lrs_));
  return state;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  last_epoch_ = state.at("last_epoch").toInt();
  base_lrs_.clear();  // a typed list (checkpoints before 2026-12) or a plain one
  for (const c10::IValue& lr : state.at("base_lrs").toListRef()) base_lrs_.push_back(lr.toDouble());
  if (last_epoch_ > 0) {
    const auto lrs = compute_lrs();
    auto& groups = optimizer_.param_groups();
    for (size_t i = 0; i < groups.size() && i < lrs.size(); ++i) set_lr(groups[i], lrs[i]);
  }
}

StepLR::StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  LT_CHECK_VALUE(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
}

std::vector<double> StepLR::compute_lrs() const {
  std::vector<double> out;
  const double factor = std::pow(gamma_, static_cast<double>(last_epoch() / step_size_));
  for (double base : base_lrs()) out.push_back(base * factor);
  return out;
}

LambdaLR::LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {}

std::vector<double> LambdaLR::compute_lrs() const {
  std::vector<double> out;
  for (double base : base_lrs()) out.push_back(base * factor_(last_epoch()));
  return out;
}

}  // namespace lt
