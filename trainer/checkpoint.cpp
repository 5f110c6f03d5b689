// The Trainer's checkpoints: what a checkpoint holds (dump_checkpoint; the
// layout is core/training_state.h's) and how a run restores it; the file
// format is the strategy's CheckpointIO's (core/checkpoint_plugin.h).
#include <lightning_cpp/trainer/trainer.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/core/training_state.h>
#include <lightning_cpp/data/epoch_samples.h>

namespace lt {

StateDict Trainer::dump_checkpoint() {
  LT_CHECK(module_ != nullptr, "Trainer::dump_checkpoint: no module is attached (call it during a run)");
  CheckpointExtras extras;
  if (fit_loader_ != nullptr) {
    extras.epoch_samples = epoch_samples_state(*fit_loader_, state_, *strategy_);
    if (!fit_datamodule_hparams_.empty()) extras.datamodule_hparams = fit_datamodule_hparams_;
  }
  extras.callbacks = new_state_dict();
  for (const auto& cb : options_.callbacks()) extras.callbacks->insert(cb->state_key(), cb->state_dict());
  if (const auto& logger = options_.logger(); logger && strategy_->is_global_zero()) {
    logger->save();  // what the checkpoint counts is on disk
    extras.logger = logger->state_dict();
  }
  extras.steps_epoch_scheduler = true;  // the fit loop's
  StateDict ckpt = new_state_dict();
  dump_training_state(ckpt, *strategy_, *module_, optim_, state_, extras);
  for (const auto& cb : options_.callbacks()) cb->on_save_checkpoint(*this, *module_, ckpt);
  module_->on_save_checkpoint(ckpt);
  return ckpt;
}

void Trainer::save_checkpoint(const std::string& path) {
  strategy_->save_checkpoint(dump_checkpoint(), path);
}

void Trainer::restore_weights(const std::string& path) {
  LT_CHECK(module_ != nullptr, "Trainer::restore_weights: no module is attached");
  strategy_->load_module_state(*module_, state_dict_from(strategy_->load_checkpoint(path), path));
}

StateDict Trainer::restore_checkpoint(const std::string& path) {
  LT_CHECK(module_ != nullptr, "Trainer::restore_checkpoint: no module is attached");
  const c10::IValue loaded = strategy_->load_checkpoint(path);
  const StateDict raw = restore_training_state(loaded, path, *strategy_, *module_, optim_, state_);
  auto to_state = [](const c10::IValue& v) { return StateDict(v.toGenericDict()); };
  if (raw.contains("callbacks")) {
    auto callbacks = raw.at("callbacks").toGenericDict();
    for (const auto& cb : options_.callbacks()) {
      if (callbacks.contains(cb->state_key())) cb->load_state_dict(to_state(callbacks.at(cb->state_key())));
    }
  }
  if (const auto& logger = options_.logger(); logger && strategy_->is_global_zero() && raw.contains("logger")) {
    logger->load_state_dict(to_state(raw.at("logger")));
  }
  for (const auto& cb : options_.callbacks()) cb->on_load_checkpoint(*this, *module_, to_state(loaded));
  module_->on_load_checkpoint(to_state(loaded));
  return raw;
}

}  // namespace lt
