#include <lightning_cpp/callbacks/timer.h>

#include <sstream>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

std::chrono::duration<double> parse_duration(const std::string& text) {
  std::vector<double> parts;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ':')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    LT_CHECK_VALUE(!item.empty() && end == item.c_str() + item.size() && v >= 0, "Timer: duration '", text,
                   "' is not of the form DD:HH:MM:SS");
    parts.push_back(v);
  }
  LT_CHECK_VALUE(!parts.empty() && parts.size() <= 4, "Timer: duration '", text, "' is not of the form DD:HH:MM:SS");
  static const double kUnits[] = {1.0, 60.0, 3600.0, 86400.0};
  double seconds = 0.0;
  for (size_t i = 0; i < parts.size(); ++i) seconds += parts[parts.size() - 1 - i] * kUnits[i];
  return std::chrono::duration<double>(seconds);
}

void DurationText::add(ArgSchema& schema, const char* name, const Duration& d, const char* doc,
                       std::vector<std::string> choices) {
  schema.add_string(name, d ? std::optional<std::string>(c10::str(d->count())) : std::nullopt, doc,
                    std::move(choices));
}

DurationText::Duration DurationText::read(const InitArgs& args, const char* name) {
  if (auto text = args.get_optional_string(name)) return parse_duration(*text);
  return std::nullopt;
}

std::string DurationText::show(const Duration& duration) {
  return duration ? c10::str(duration->count(), " s") : std::string("null");
}

Timer::Timer(TimerOptions options) : options_(std::move(options)) {
  {
    const TimerOptions& options = options_;
    const char* owner = "Timer: ";
#define LT_OPTION LT_OPTION_CHECK
#define LT_OPTION_WITH LT_OPTION_WITH_CHECK
#include <lightning_cpp/callbacks/timer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
  }
}

void Timer::start(const std::string& stage) { started_[stage] = Clock::now(); }

void Timer::stop(const std::string& stage) {
  auto it = started_.find(stage);
  if (it == started_.end()) return;
  accumulated_[stage] += std::chrono::duration<double>(Clock::now() - it->second).count();
  started_.erase(it);
}

double Timer::time_elapsed(const std::string& stage) const {
  double t = accumulated_.count(stage) ? accumulated_.at(stage) : 0.0;
  auto it = started_.find(stage);
  if (it != started_.end()) t += std::chrono::duration<double>(Clock::now() - it->second).count();
  return t;
}

std::optional<double> Timer::time_remaining() const {
  if (!options_.duration()) return std::nullopt;
  return options_.duration()->count() - time_elapsed("train");
}

void Timer::on_train_start(Trainer&, LightningModule&) { start("train"); }
void Timer::on_train_end(Trainer&, LightningModule&) { stop("train"); }
void Timer::on_validation_start(Trainer&, LightningModule&) { start("validate"); }
void Timer::on_validation_end(Trainer&, LightningModule&) { stop("validate"); }
void Timer::on_test_start(Trainer&, LightningModule&) { start("test"); }
void Timer::on_test_end(Trainer&, LightningModule&) { stop("test"); }

void Timer::check(Trainer& trainer) {
  if (!options_.duration()) return;
  bool stop_now = time_elapsed("train") >= options_.duration()->count();
  // Ranks' clocks differ: the first to run out stops them all, at the same step.
  stop_now = trainer.strategy().reduce_boolean_decision(stop_now, /*all=*/false);
  if (!stop_now) return;
  trainer.set_should_stop(true);
  if (options_.verbose() && trainer.is_global_zero()) {
    rank_zero_info("Timer: time limit of ", options_.duration()->count(), " s reached; stopping at epoch ",
                   trainer.current_epoch(), ", step ", trainer.global_step());
  }
}

// After each optimizer step: the hook every rank runs at every step, a rank
// that finished its data too in lockstep Join (a batch hook would leave the
// check's collective unmatched on a rank in padding or joined).
void Timer::on_after_optimizer_step(Trainer& trainer, LightningModule&) {
  if (options_.interval() == "step") check(trainer);
}

JoinSupport Timer::join_support(const TrainerOptions& /*options*/) const {
  if (!options_.duration() || options_.interval() != "step") return JoinSupport::compatible();
  return JoinSupport::needs_lockstep(
      "with interval: step it agrees on the time limit through a collective after every optimizer step, which a "
      "rank that ran out of data takes only in lockstep Join",
      "use join_mode: lockstep (the default), or interval: epoch");
}

void Timer::on_train_epoch_end(Trainer& trainer, LightningModule&) {
  if (options_.interval() == "epoch") check(trainer);
}

StateDict Timer::state_dict() const {
  StateDict s = new_state_dict();
  c10::Dict<std::string, double> elapsed;
  for (const char* stage : {"train", "validate", "test"}) elapsed.insert(stage, time_elapsed(stage));
  s.insert("time_elapsed", elapsed);
  return s;
}

void Timer::load_state_dict(const StateDict& state) {
  if (!state.contains("time_elapsed")) return;
  for (const auto& kv : state.at("time_elapsed").toGenericDict()) {
    accumulated_[kv.key().toStringRef()] = kv.value().toDouble();
  }
}

}  // namespace lt
