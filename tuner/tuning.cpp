#include <lightning_cpp/tuner/tuning.h>

#include <cmath>
#include <limits>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

namespace {

// The sweep's callback (Lightning's _LRCallback with _exchange_scheduler):
// gives the optimizer the sweep's rates, records each step's rate and loss.
class LRSweep : public Callback {
 public:
  LRSweep(const LRFinderOptions& options, LRFinder& results) : options_(options), results_(results) {}
  std::string name() const override { return "LRFinder"; }
  JoinSupport join_support(const TrainerOptions& /*options*/) const override {
    return JoinSupport::needs_lockstep(
        "lr_find agrees on each step's loss across ranks after the step, which a rank that ran out of data takes "
        "only in lockstep Join",
        "use join_mode: lockstep (the default) with automatic optimization, or uneven_inputs: pad");
  }

  void on_fit_start(Trainer& trainer, LightningModule& module) override {
    OptimizerConfig* config = trainer.optimizer_config();
    LT_CHECK_VALUE(config != nullptr, "lr_find: configure_optimizers returned no optimizer");
    LT_CHECK_VALUE(config->optimizers.size() <= 1, "lr_find works with one optimizer; configure_optimizers returned ",
                   config->optimizers.size());
    LT_CHECK_VALUE(module.automatic_optimization(),
                   "lr_find needs automatic optimization (the loop steps the sweep's rates after each step)");
    for (auto& group : config->optimizer->param_groups()) set_lr(group, options_.min_lr());
    const double ratio = options_.max_lr() / options_.min_lr();
    const auto steps = static_cast<double>(options_.num_training());
    const bool linear = options_.mode() == "linear";
    // Lightning's _ExponentialLR / _LinearLR: step 0 at min_lr, step k > 0 at (k + 1) / num_training of the way.
    config->lr_scheduler = std::make_shared<LambdaLR>(*config->optimizer, [=](int64_t k) {
      if (k == 0) return 1.0;
      const double r = static_cast<double>(k + 1) / steps;
      return linear ? 1 + r * (ratio - 1) : std::pow(ratio, r);
    });
    config->interval = Interval::kStep;
    config->frequency = 1;
    config->monitor.clear();
    next_lr_ = options_.min_lr();
  }

  // Lightning records the loss training_step returned (loss.item()).
  void on_train_batch_end(Trainer& /*trainer*/, LightningModule& /*module*/, const torch::Tensor& loss,
                          const Batch& /*batch*/, int64_t /*batch_idx*/) override {
    if (!loss.defined()) return;
    sum_ += loss.detach().to(torch::kDouble).item<double>();
    count_ += 1;
  }

  // Every rank, after every step (lockstep Join too): the step's loss is the
  // mean over the window's micro-batches on every rank.
  void on_after_optimizer_step(Trainer& trainer, LightningModule& /*module*/) override {
    double sum = sum_, count = count_;
    sum_ = count_ = 0;
    Strategy& strategy = trainer.strategy();
    if (strategy.world_size() > 1) {
      const torch::Tensor total =
          strategy
              .reduce(torch::tensor({sum, count}, torch::dtype(torch::kDouble).device(strategy.root_device())),
                      ReduceOp::kSum)
              .cpu();
      sum = total[0].item<double>();
      count = total[1].item<double>();
    }
    results_.lrs.push_back(next_lr_);
    next_lr_ = get_lr(trainer.optimizer_config()->optimizer->param_groups()[0]);
    if (count == 0) {  // no loss returned (Lightning: a step without outputs)
      results_.raw_losses.push_back(std::numeric_limits<double>::quiet_NaN());
      results_.losses.push_back(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    const double loss = sum / count;
    const int64_t step = trainer.global_step();
    avg_loss_ = kBeta * avg_loss_ + (1 - kBeta) * loss;
    const double smoothed = avg_loss_ / (1 - std::pow(kBeta, static_cast<double>(step + 1)));
    const std::optional<double>& threshold = options_.early_stop_threshold();
    if (threshold && step > 1 && smoothed > *threshold * best_loss_) trainer.set_should_stop(true);
    if (smoothed < best_loss_ || step == 1) best_loss_ = smoothed;
    results_.raw_losses.push_back(loss);
    results_.losses.push_back(smoothed);
  }

 private:
  static constexpr double kBeta = 0.98;
  const LRFinderOptions& options_;
  LRFinder& results_;
  double next_lr_ = 0;
  double sum_ = 0, count_ = 0;
  double avg_loss_ = 0, best_loss_ = 0;
};

// The module's parameters and buffers as they were; put back by restore()
// or, if the sweep failed, on leaving.
class ModuleSnapshot {
 public:
  explicit ModuleSnapshot(torch::nn::Module& module) : module_(module) {
    for (const auto& entry : module_state_dict(module)) saved_.insert(entry.key(), entry.value().detach().clone());
  }
  ~ModuleSnapshot() {
    try {
      restore();
    } catch (...) {  // already failing: the sweep's error is the one to report
    }
  }
  ModuleSnapshot(const ModuleSnapshot&) = delete;
  ModuleSnapshot& operator=(const ModuleSnapshot&) = delete;

  void restore() {
    if (restored_) return;
    restored_ = true;
    load_module_state_dict(module_, saved_);  // strict: every name, every shape
    for (auto& p : module_.parameters()) p.mutable_grad() = torch::Tensor();
  }

 private:
  torch::nn::Module& module_;
  c10::Dict<std::string, torch::Tensor> saved_;
  bool restored_ = false;
};

// The hparams key update_attr writes: attr_name, else "lr" or "learning_rate" (Lightning's names).
std::string lr_key(const LightningModule& module, const LRFinderOptions& options) {
  const HParams& hparams = module.hparams();
  if (!options.attr_name().empty()) {
    LT_CHECK_VALUE(hparams.count(options.attr_name()), "lr_find: update_attr: the module's hparams have no '",
                   options.attr_name(), "' (attr_name)");
    return options.attr_name();
  }
  for (const char* key : {"lr", "learning_rate"}) {
    if (hparams.count(key)) return key;
  }
  std::vector<std::string> keys;
  for (const auto& [key, value] : hparams) keys.push_back(key);
  throw ValueError(
      c10::str("lr_find: update_attr: the module's hparams have neither 'lr' nor 'learning_rate' (",
               keys.empty() ? std::string("none") : c10::Join(", ", keys),
               "); set hparams()[\"lr\"] in the module, give attr_name, or update_attr(false) and use the suggestion"));
}

LRFinder sweep(Trainer& trainer, LightningModule& module, const LRFinderOptions& options,
               const std::function<void(Trainer&)>& fit) {
  options.check();
  LRFinder results;
  results.mode = options.mode();
  if (trainer.options().fast_dev_run() > 0) {
    rank_zero_warn("Skipping learning rate finder since `fast_dev_run` is enabled.");
    return results;
  }
  const std::string key = options.update_attr() ? lr_key(module, options) : std::string();
  ModuleSnapshot snapshot(module);
  {
    // The Trainer's strategy (its processes, process group and launcher
    // state), which outlives this sweep: not owned here.
    TrainerOptions sweep_options = trainer.options();
    sweep_options.strategy(std::shared_ptr<Strategy>(&trainer.strategy(), [](Strategy*) {}))
        .callbacks({std::make_shared<LRSweep>(options, results)})
        .logger(nullptr)
        .default_logger(false)
        .enable_progress_bar(false)
        .enable_model_summary(false)
        .lr_scheduler(nullptr)
        .profiler(nullptr)
        .max_steps(options.num_training())
        .max_epochs(-1)
        .limit_val_batches(FractionOrCount(int64_t{0}))
        .num_sanity_val_steps(0);
    Trainer sweep_trainer(sweep_options);
    fit(sweep_trainer);
  }
  snapshot.restore();
  const int64_t steps = static_cast<int64_t>(results.lrs.size());
  if (steps < options.num_training()) {
    rank_zero_info("LR finder stopped early after ", steps, " steps due to diverging loss.");
  }
  const std::optional<double> suggested = results.suggestion();
  if (!key.empty() && suggested) {
    module.hparams()[key] = *suggested;
    rank_zero_info("Learning rate set to ", *suggested, " (hparams \"", key, "\")");
  }
  return results;
}

}  // namespace

LRFinder Tuner::lr_find(const std::shared_ptr<LightningModule>& module, std::shared_ptr<DataLoader> train,
                        const LRFinderOptions& options) {
  LT_CHECK(module != nullptr, "lr_find: the module is null");
  return sweep(trainer_, *module, options, [&](Trainer& t) { t.fit(module, std::move(train), nullptr); });
}

LRFinder Tuner::lr_find(const std::shared_ptr<LightningModule>& module, const std::shared_ptr<DataModule>& data,
                        const LRFinderOptions& options) {
  LT_CHECK(module != nullptr, "lr_find: the module is null");
  return sweep(trainer_, *module, options, [&](Trainer& t) { t.fit(module, data); });
}

}  // namespace lt
