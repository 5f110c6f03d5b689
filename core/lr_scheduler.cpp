#include <lightning_cpp/core/lr_scheduler.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {
constexpr double kPi = 3.14159265358979323846;

// One value per param group: a single one is every group's.
std::vector<double> per_group(const std::vector<double>& values, size_t groups, const char* what) {
  LT_CHECK_VALUE(values.size() == 1 || values.size() == groups, what, ": one value or one per param group (",
                 groups, "), got ", values.size());
  return values.size() == 1 ? std::vector<double>(groups, values.front()) : values;
}

// From each base rate to eta_min along half a cosine: step t of `period`.
std::vector<double> cosine_lrs(const std::vector<double>& base_lrs, double eta_min, int64_t t, int64_t period) {
  const double c = 1.0 + std::cos(kPi * static_cast<double>(t) / static_cast<double>(period));
  std::vector<double> out;
  for (double base : base_lrs) out.push_back(eta_min + (base - eta_min) * c / 2.0);
  return out;
}

// Adam's and AdamW's beta1, or SGD's momentum: what OneCycleLR cycles. Null where the optimizer has neither.
template <typename Fn>
bool with_momentum(torch::optim::OptimizerOptions& options, Fn&& fn) {
  if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) {
    double m = sgd->momentum();
    fn(m);
    sgd->momentum(m);
    return true;
  }
  if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) {
    auto betas = adam->betas();
    fn(std::get<0>(betas));
    adam->betas(betas);
    return true;
  }
  if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options)) {
    auto betas = adamw->betas();
    fn(std::get<0>(betas));
    adamw->betas(betas);
    return true;
  }
  return false;
}
}  // namespace

double get_lr(const torch::optim::OptimizerParamGroup& group) {
  return const_cast<torch::optim::OptimizerParamGroup&>(group).options().get_lr();
}

void set_lr(torch::optim::OptimizerParamGroup& group, double lr) { group.options().set_lr(lr); }

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {
  for (auto& group : optimizer_.param_groups()) base_lrs_.push_back(get_lr(group));
}

void LRScheduler::step() {
  LT_CHECK(!monitors_metric(), "LRScheduler: this scheduler follows a metric: step(metric), and give the ",
           "OptimizerConfig a monitor");
  ++last_epoch_;
  apply();
}

void LRScheduler::step(double /*metric*/) {
  LT_CHECK(false, "LRScheduler: step(metric) is for a scheduler that follows a metric (ReduceLROnPlateau); this ",
           "one steps with step()");
}

void LRScheduler::apply() {
  const auto lrs = compute_lrs();
  auto& groups = optimizer_.param_groups();
  LT_INTERNAL_ASSERT(lrs.size() == groups.size(), "LRScheduler: ", lrs.size(), " rates for ", groups.size(),
                     " param groups");
  for (size_t i = 0; i < groups.size(); ++i) set_lr(groups[i], lrs[i]);
}

std::vector<double> LRScheduler::scaled_base_lrs(double factor) const {
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(base * factor);
  return out;
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
  // What PyTorch's scheduler holds beside them, so that Python's
  // load_state_dict (and Lightning's resume) sees the same rates and count.
  state.insert("_step_count", last_epoch_ + 1);
  state.insert("_last_lr", c10::IValue(get_last_lr()));
  return state;
}

void LRScheduler::load_state_dict(const StateDict& state) {
  last_epoch_ = state.at("last_epoch").toInt();
  base_lrs_.clear();  // a typed list (checkpoints before 2026-12) or a plain one
  for (const c10::IValue& lr : state.at("base_lrs").toListRef()) base_lrs_.push_back(lr.toDouble());
  apply();
}

StepLR::StepLR(torch::optim::Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  LT_CHECK_VALUE(step_size >= 1, "StepLR: step_size must be >= 1, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::compute_lrs() const {
  return scaled_base_lrs(std::pow(gamma_, static_cast<double>(last_epoch() / step_size_)));
}

MultiStepLR::MultiStepLR(torch::optim::Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::compute_lrs() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) - milestones_.begin();
  return scaled_base_lrs(std::pow(gamma_, static_cast<double>(passed)));
}

ExponentialLR::ExponentialLR(torch::optim::Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::compute_lrs() const {
  return scaled_base_lrs(std::pow(gamma_, static_cast<double>(last_epoch())));
}

LambdaLR::LambdaLR(torch::optim::Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {
  LT_CHECK_VALUE(factor_ != nullptr, "LambdaLR: the factor function is empty");
  initial_step();
}

std::vector<double> LambdaLR::compute_lrs() const {
  std::vector<double> out;
  for (double base : base_lrs()) out.push_back(base * factor_(last_epoch()));
  return out;
}

LinearLR::LinearLR(torch::optim::Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  LT_CHECK_VALUE(start_factor > 0.0 && start_factor <= 1.0, "LinearLR: start_factor must be in (0, 1], got ",
                 start_factor);
  LT_CHECK_VALUE(end_factor >= 0.0 && end_factor <= 1.0, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  LT_CHECK_VALUE(total_iters >= 1, "LinearLR: total_iters must be >= 1, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::compute_lrs() const {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch())) / static_cast<double>(total_iters_);
  return scaled_base_lrs(start_factor_ + (end_factor_ - start_factor_) * done);
}

CosineAnnealingLR::CosineAnnealingLR(torch::optim::Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  LT_CHECK_VALUE(T_max >= 1, "CosineAnnealingLR: T_max must be >= 1, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::compute_lrs() const {
  return cosine_lrs(base_lrs(), eta_min_, last_epoch(), t_max_);
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(torch::optim::Optimizer& optimizer, int64_t T_0,
                                                         int64_t T_mult, double eta_min)
    : LRScheduler(optimizer), t_0_(T_0), t_mult_(T_mult), eta_min_(eta_min) {
  LT_CHECK_VALUE(T_0 >= 1, "CosineAnnealingWarmRestarts: T_0 must be >= 1, got ", T_0);
  LT_CHECK_VALUE(T_mult >= 1, "CosineAnnealingWarmRestarts: T_mult must be >= 1, got ", T_mult);
  initial_step();
}

std::vector<double> CosineAnnealingWarmRestarts::compute_lrs() const {
  // Where in which period the step is: each period is T_mult times the last.
  int64_t t_cur = last_epoch(), t_i = t_0_;
  while (t_cur >= t_i) {
    t_cur -= t_i;
    t_i *= t_mult_;
  }
  return cosine_lrs(base_lrs(), eta_min_, t_cur, t_i);
}

OneCycleLR::OneCycleLR(torch::optim::Optimizer& optimizer, OneCycleLROptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  const char* who = "OneCycleLR";
  LT_CHECK_VALUE(options_.total_steps() >= 1, who, ": total_steps must be >= 1, got ", options_.total_steps());
  LT_CHECK_VALUE(options_.pct_start() >= 0.0 && options_.pct_start() <= 1.0, who,
                 ": pct_start must be in [0, 1], got ", options_.pct_start());
  LT_CHECK_VALUE(options_.anneal_strategy() == "cos" || options_.anneal_strategy() == "linear", who,
                 ": anneal_strategy must be cos or linear, got '", options_.anneal_strategy(), "'");
  const double total = static_cast<double>(options_.total_steps()), pct = options_.pct_start();
  if (options_.three_phase()) {
    phases_ = {{pct * total - 1, 0, 1, 0, 1}, {2 * pct * total - 2, 1, 0, 1, 0}, {total - 1, 0, 2, 0, 0}};
  } else {
    phases_ = {{pct * total - 1, 0, 1, 0, 1}, {total - 1, 1, 2, 1, 0}};
  }
  auto& groups = optimizer.param_groups();
  max_lrs_ = per_group(options_.max_lr(), groups.size(), "OneCycleLR: max_lr");
  for (double max_lr : max_lrs_) {
    initial_lrs_.push_back(max_lr / options_.div_factor());
    min_lrs_.push_back(initial_lrs_.back() / options_.final_div_factor());
  }
  if (options_.cycle_momentum()) {
    for (auto& group : groups) {
      LT_CHECK_VALUE(with_momentum(group.options(), [&](double& m) { m = options_.max_momentum(); }), who,
                     ": cycle_momentum needs an optimizer with momentum (SGD) or beta1 (Adam, AdamW); set ",
                     "cycle_momentum false");
    }
  }
  initial_step();
}

double OneCycleLR::at(size_t group, bool momentum) const {
  const double step = static_cast<double>(last_epoch());
  LT_CHECK(last_epoch() <= options_.total_steps(), "OneCycleLR: stepped ", last_epoch(),
           " times, but total_steps is ", options_.total_steps());
  const double lrs[3] = {initial_lrs_[group], max_lrs_[group], min_lrs_[group]};
  const double momenta[2] = {options_.max_momentum(), options_.base_momentum()};
  double start_step = 0.0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (step <= phase.end_step || i + 1 == phases_.size()) {
      const double pct = (step - start_step) / (phase.end_step - start_step);
      const double start = momentum ? momenta[phase.start_momentum] : lrs[phase.start_lr];
      const double end = momentum ? momenta[phase.end_momentum] : lrs[phase.end_lr];
      if (options_.anneal_strategy() == "linear") return (end - start) * pct + start;
      return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
    }
    start_step = phase.end_step;
  }
  return 0.0;  // not reached: the last phase takes every step
}

std::vector<double> OneCycleLR::compute_lrs() const {
  std::vector<double> out;
  for (size_t g = 0; g < max_lrs_.size(); ++g) out.push_back(at(g, false));
  return out;
}

void OneCycleLR::apply() {
  LRScheduler::apply();
  if (!options_.cycle_momentum()) return;
  auto& groups = optimizer().param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double m = at(g, true);
    with_momentum(groups[g].options(), [m](double& value) { value = m; });
  }
}

SequentialLR::SequentialLR(torch::optim::Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  LT_CHECK_VALUE(!schedulers_.empty(), "SequentialLR: no schedulers");
  LT_CHECK_VALUE(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ", schedulers_.size(),
                 " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  for (const auto& s : schedulers_) {
    LT_CHECK_VALUE(s != nullptr && &s->optimizer_ == &optimizer, "SequentialLR: every scheduler must be of its ",
                   "optimizer");
    LT_CHECK_VALUE(!s->monitors_metric(), "SequentialLR: a scheduler that follows a metric cannot be one of its");
    // Each made its own initial step, changing the rates the next one took as its base: all take the first's.
    s->base_lrs_ = schedulers_.front()->base_lrs_;
  }
  base_lrs_ = schedulers_.front()->base_lrs_;
  initial_step();
}

LRScheduler& SequentialLR::current() const {
  const auto index = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch()) - milestones_.begin();
  LRScheduler& s = *schedulers_[static_cast<size_t>(index)];
  s.last_epoch_ = last_epoch() - (index == 0 ? 0 : milestones_[static_cast<size_t>(index) - 1]);
  return s;
}

std::vector<double> SequentialLR::compute_lrs() const { return current().compute_lrs(); }

void SequentialLR::apply() { current().apply(); }

StateDict SequentialLR::state_dict() const {
  StateDict state = LRScheduler::state_dict();
  c10::impl::GenericList children(c10::AnyType::get());
  for (const auto& s : schedulers_) children.push_back(s->state_dict());
  state.insert("schedulers", children);
  return state;
}

void SequentialLR::load_state_dict(const StateDict& state) {
  if (state.contains("schedulers")) {
    const auto children = state.at("schedulers").toListRef();
    LT_CHECK_VALUE(children.size() == schedulers_.size(), "SequentialLR: the checkpoint has ", children.size(),
                   " schedulers, this one ", schedulers_.size());
    for (size_t i = 0; i < children.size(); ++i) {
      schedulers_[i]->load_state_dict(StateDict(children[i].toGenericDict()));
    }
  }
  LRScheduler::load_state_dict(state);
}

ReduceLROnPlateau::ReduceLROnPlateau(torch::optim::Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  const char* who = "ReduceLROnPlateau";
  LT_CHECK_VALUE(options_.mode() == "min" || options_.mode() == "max", who, ": mode must be min or max, got '",
                 options_.mode(), "'");
  LT_CHECK_VALUE(options_.threshold_mode() == "rel" || options_.threshold_mode() == "abs", who,
                 ": threshold_mode must be rel or abs, got '", options_.threshold_mode(), "'");
  LT_CHECK_VALUE(options_.factor() < 1.0 && options_.factor() >= 0.0, who, ": factor must be in [0, 1), got ",
                 options_.factor());
  LT_CHECK_VALUE(options_.patience() >= 0, who, ": patience must be >= 0, got ", options_.patience());
  min_lrs_ = per_group(options_.min_lr(), optimizer.param_groups().size(), "ReduceLROnPlateau: min_lr");
  best_ = options_.mode() == "min" ? std::numeric_limits<double>::infinity()
                                   : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double value) const {
  const double t = options_.threshold();
  const bool rel = options_.threshold_mode() == "rel";
  if (options_.mode() == "min") return rel ? value < best_ * (1.0 - t) : value < best_ - t;
  return rel ? value > best_ * (t + 1.0) : value > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience()) {
    auto& groups = optimizer().param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = get_lr(groups[i]);
      const double new_lr = std::max(old_lr * options_.factor(), min_lrs_[i]);
      if (old_lr - new_lr > options_.eps()) set_lr(groups[i], new_lr);
    }
    cooldown_counter_ = options_.cooldown();
    num_bad_epochs_ = 0;
  }
}

std::vector<double> ReduceLROnPlateau::compute_lrs() const { return get_last_lr(); }

StateDict ReduceLROnPlateau::state_dict() const {
  StateDict state = LRScheduler::state_dict();
  state.insert("best", best_);
  state.insert("num_bad_epochs", num_bad_epochs_);
  state.insert("cooldown_counter", cooldown_counter_);
  return state;
}

void ReduceLROnPlateau::load_state_dict(const StateDict& state) {
  LRScheduler::load_state_dict(state);  // the rates themselves come back with the optimizer's state
  best_ = state.at("best").toDouble();
  num_bad_epochs_ = state.at("num_bad_epochs").toInt();
  cooldown_counter_ = state.at("cooldown_counter").toInt();
}

}  // namespace lt
