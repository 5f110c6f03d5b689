#include <lightning_cpp/callbacks/lr_monitor.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

std::string optimizer_name(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return "AdamW";
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return "Adam";
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return "SGD";
  if (dynamic_cast<const torch::optim::RMSprop*>(&optimizer)) return "RMSprop";
  if (dynamic_cast<const torch::optim::Adagrad*>(&optimizer)) return "Adagrad";
  if (dynamic_cast<const torch::optim::LBFGS*>(&optimizer)) return "LBFGS";
  return "Optimizer";
}

LearningRateMonitor::LearningRateMonitor(LearningRateMonitorOptions options) : options_(std::move(options)) {
  {
    const LearningRateMonitorOptions& options = options_;
    const char* owner = "LearningRateMonitor: ";
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/callbacks/lr_monitor_options.def>
#undef LT_OPTION
  }
}

namespace {
std::optional<double> momentum_of(const torch::optim::OptimizerParamGroup& group) {
  const auto& o = group.options();
  if (auto* sgd = dynamic_cast<const torch::optim::SGDOptions*>(&o)) return sgd->momentum();
  if (auto* adamw = dynamic_cast<const torch::optim::AdamWOptions*>(&o)) return std::get<0>(adamw->betas());
  if (auto* adam = dynamic_cast<const torch::optim::AdamOptions*>(&o)) return std::get<0>(adam->betas());
  if (auto* rms = dynamic_cast<const torch::optim::RMSpropOptions*>(&o)) return rms->momentum();
  return std::nullopt;
}
}  // namespace

std::map<std::string, double> LearningRateMonitor::extract(Trainer& trainer) const {
  std::map<std::string, double> out;
  OptimizerConfig* config = trainer.optimizer_config();
  if (config == nullptr) return out;
  auto& groups = config->optimizer->param_groups();
  const std::string base = "lr-" + optimizer_name(*config->optimizer);
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string key = groups.size() == 1 ? base : c10::str(base, "/pg", i + 1);
    out[key] = get_lr(groups[i]);
    if (options_.log_momentum()) {
      if (auto m = momentum_of(groups[i])) out[key + "-momentum"] = *m;
    }
  }
  return out;
}

bool LearningRateMonitor::logs_per_step(Trainer& trainer) const {
  if (!options_.logging_interval().empty()) return options_.logging_interval() == "step";
  OptimizerConfig* config = trainer.optimizer_config();
  return config != nullptr && config->lr_scheduler != nullptr && config->interval == Interval::kStep;
}

void LearningRateMonitor::log(Trainer& trainer) {
  last_ = extract(trainer);
  if (!last_.empty() && trainer.logger() != nullptr && trainer.is_global_zero()) {
    trainer.logger()->log_metrics(last_, trainer.global_step());
  }
}

void LearningRateMonitor::on_train_batch_start(Trainer& trainer, LightningModule& /*module*/, const Batch& /*batch*/,
                                               int64_t /*batch_idx*/) {
  if (!logs_per_step(trainer)) return;
  if (trainer.global_step() % trainer.options().log_every_n_steps() != 0) return;
  log(trainer);
}

void LearningRateMonitor::on_train_epoch_start(Trainer& trainer, LightningModule& /*module*/) {
  if (logs_per_step(trainer)) return;
  log(trainer);
}

}  // namespace lt
