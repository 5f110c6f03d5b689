#include <lightning_cpp/callbacks/early_stopping.h>

#include <limits>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

EarlyStopping::EarlyStopping(EarlyStoppingOptions options) : options_(std::move(options)) {
  {
    const EarlyStoppingOptions& options = options_;
    const char* owner = "EarlyStopping: ";
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/callbacks/early_stopping_options.def>
#undef LT_OPTION
  }
  LT_CHECK_VALUE(!options_.monitor().empty(), "EarlyStopping: monitor must name a logged metric");
  options_.min_delta(std::abs(options_.min_delta()));
  best_score_ = options_.mode() == "min" ? std::numeric_limits<double>::infinity()
                                         : -std::numeric_limits<double>::infinity();
}

std::string EarlyStopping::state_key() const {
  return c10::str("EarlyStopping{'monitor': '", options_.monitor(), "', 'mode': '", options_.mode(), "'}");
}

JoinSupport EarlyStopping::join_support(const TrainerOptions& /*options*/) const { return JoinSupport::compatible(); }

void EarlyStopping::setup(Trainer& trainer, LightningModule& /*module*/, Stage /*stage*/) {
  if (options_.check_on_train_epoch_end()) {
    check_on_train_epoch_end_ = *options_.check_on_train_epoch_end();
  } else {
    const auto& interval = trainer.options().val_check_interval();
    const bool once_at_epoch_end = !interval.is_count() && interval.fraction() == 1.0;
    check_on_train_epoch_end_ = once_at_epoch_end && trainer.options().check_val_every_n_epoch() == 1;
  }
}

void EarlyStopping::on_train_epoch_end(Trainer& trainer, LightningModule& /*module*/) {
  if (check_on_train_epoch_end_) run_check(trainer);
}

void EarlyStopping::on_validation_end(Trainer& trainer, LightningModule& /*module*/) {
  if (check_on_train_epoch_end_ || trainer.state().sanity_checking || trainer.state().stage != Stage::kValidate) return;
  run_check(trainer);
}

void EarlyStopping::run_check(Trainer& trainer) {
  const auto& metrics = trainer.callback_metrics();
  auto it = metrics.find(options_.monitor());
  if (it == metrics.end()) {
    if (!options_.strict()) return;
    std::string available;
    for (const auto& kv : metrics) available += (available.empty() ? "" : ", ") + kv.first;
    throw ValueError(c10::str("EarlyStopping: monitored metric '", options_.monitor(),
                              "' was not logged; available metrics: ",
                              available.empty() ? std::string("(none)") : available,
                              ". Log it with self.log, or pass strict=false"));
  }
  bool stop = evaluate(it->second);
  // Every rank takes part, so the decision is the same everywhere.
  stop = trainer.strategy().reduce_boolean_decision(stop, /*all=*/false);
  if (stop) {
    stopped_epoch_ = trainer.current_epoch();
    trainer.set_should_stop(true);
    if (options_.verbose() && trainer.is_global_zero()) rank_zero_info("EarlyStopping: ", reason_);
  }
}

bool EarlyStopping::evaluate(double current) {
  const bool min = options_.mode() == "min";
  const std::string& m = options_.monitor();
  reason_.clear();
  if (options_.check_finite() && !std::isfinite(current)) {
    reason_ = c10::str("monitored metric ", m, " = ", current, " is not finite; previous best score: ", best_score_,
                       ". Signaling Trainer to stop.");
    return true;
  }
  if (options_.stopping_threshold() && better(current, *options_.stopping_threshold())) {
    reason_ = c10::str("stopping threshold reached: ", m, " = ", current, (min ? " < " : " > "),
                       *options_.stopping_threshold(), ". Signaling Trainer to stop.");
    return true;
  }
  if (options_.divergence_threshold() && better(-current, -*options_.divergence_threshold())) {
    reason_ = c10::str("divergence threshold reached: ", m, " = ", current, (min ? " > " : " < "),
                       *options_.divergence_threshold(), ". Signaling Trainer to stop.");
    return true;
  }
  const double shifted = min ? current + options_.min_delta() : current - options_.min_delta();
  if (better(shifted, best_score_)) {
    best_score_ = current;
    wait_count_ = 0;
    return false;
  }
  ++wait_count_;
  if (wait_count_ >= options_.patience()) {
    reason_ = c10::str("monitored metric ", m, " did not improve in the last ", wait_count_,
                       " records. Best score: ", best_score_, ". Signaling Trainer to stop.");
    return true;
  }
  return false;
}

StateDict EarlyStopping::state_dict() const {
  StateDict s = new_state_dict();
  s.insert("wait_count", wait_count_);
  s.insert("stopped_epoch", stopped_epoch_);
  // A 0-dim tensor, as Lightning's (its EarlyStopping compares it with torch).
  s.insert("best_score", torch::tensor(best_score_, torch::kFloat64));
  s.insert("patience", options_.patience());
  return s;
}

void EarlyStopping::load_state_dict(const StateDict& state) {
  if (state.contains("wait_count")) wait_count_ = state.at("wait_count").toInt();
  if (state.contains("stopped_epoch")) stopped_epoch_ = state.at("stopped_epoch").toInt();
  if (state.contains("best_score")) {  // a double before 2026-12, a tensor since (Lightning's too)
    const c10::IValue& best = state.at("best_score");
    best_score_ = best.isTensor() ? best.toTensor().item<double>() : best.toDouble();
  }
}

}  // namespace lt
