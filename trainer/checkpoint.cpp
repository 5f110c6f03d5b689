// The Trainer's checkpoints: what a checkpoint holds (dump_checkpoint; the
// layout is core/training_state.h's) and how a run restores it; the file
// format is the strategy's CheckpointIO's (core/checkpoint_plugin.h).
#include <lightning_cpp/trainer/trainer.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/training_state.h>
#include <lightning_cpp/data/epoch_samples.h>

namespace lt {

StateDict Trainer::dump_checkpoint() {
  LT_CHECK(module_ != nullptr, "Trainer::dump_checkpoint: no module is attached (call it during a run)");
  StateDict ckpt = new_state_dict();
  dump_training_state(ckpt, *strategy_, *module_, optim_, state_);
  if (fit_loader_ != nullptr) {
    if (auto samples = epoch_samples_state(*fit_loader_, state_, *strategy_)) ckpt.insert("epoch_samples", *samples);
  }
  StateDict callbacks = new_state_dict();
  for (const auto& cb : options_.callbacks()) callbacks.insert(cb->state_key(), cb->state_dict());
  ckpt.insert("callbacks", callbacks);
  if (const auto& logger = options_.logger(); logger && strategy_->is_global_zero()) {
    logger->save();  // what the checkpoint counts is on disk
    ckpt.insert("logger", logger->state_dict());
  }
  StateDict hparams = new_state_dict();
  for (const auto& [k, v] : module_->hparams()) {
    std::visit([&, key = k](const auto& value) { hparams.insert(key, value); }, v.value());
  }
  ckpt.insert("hparams", hparams);
  // Written at a train epoch end (ModelCheckpoint), the checkpoint precedes the
  // fit loop's per-epoch scheduler step; the resumed run takes that step on restore.
  const bool pending = state_.epoch_ended && optim_.lr_scheduler != nullptr && optim_.interval == Interval::kEpoch &&
                       (state_.current_epoch + 1) % std::max<int64_t>(optim_.frequency, 1) == 0;
  ckpt.insert("lr_scheduler_epoch_step_pending", pending);
  for (const auto& cb : options_.callbacks()) cb->on_save_checkpoint(*this, *module_, ckpt);
  module_->on_save_checkpoint(ckpt);
  return ckpt;
}

void Trainer::save_checkpoint(const std::string& path) {
  strategy_->save_checkpoint(dump_checkpoint(), path);
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
