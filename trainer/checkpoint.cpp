// The Trainer's checkpoints: what a checkpoint holds (dump_checkpoint) and how
// a run restores it; the file format is core/checkpoint_io.h's.
#include <lightning_cpp/core/checkpoint_io.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

StateDict Trainer::dump_checkpoint() {
  LT_CHECK(module_ != nullptr, "Trainer::dump_checkpoint: no module is attached (call it during a run)");
  StateDict ckpt = new_state_dict();
  ckpt.insert("state_dict", strategy_->module_state(*module_));
  // Lightning's "epoch": the epoch during which the checkpoint was saved, at
  // its end too; whether it was finished (Lightning keeps that in its loops'
  // progress) is what says where a resumed run starts.
  ckpt.insert("epoch", state_.current_epoch);
  ckpt.insert("epoch_finished", state_.epoch_ended);
  ckpt.insert("global_step", state_.global_step);
  // Mid-epoch: where the epoch is, so that a resumed run goes on from there
  // (the loader's order is fixed by its seed and the epoch).
  if (state_.stage == Stage::kTrain && !state_.epoch_ended) ckpt.insert("epoch_iteration", state_.epoch_iteration);
  if (optim_.optimizer) ckpt.insert("optimizer", strategy_->optimizer_state(*optim_.optimizer));
  for (size_t i = 1; i < optim_.optimizers.size(); ++i) {  // manual optimization's others
    ckpt.insert(c10::str("optimizer_", i), strategy_->optimizer_state(*optim_.optimizers[i]));
  }
  if (optim_.lr_scheduler) ckpt.insert("lr_scheduler", optim_.lr_scheduler->state_dict());
  if (StateDict precision = strategy_->precision().state_dict(); !precision.empty()) {
    ckpt.insert(strategy_->precision().state_key(), precision);  // 16-mixed: the gradient scaler's
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
  ckpt.insert("lightning_cpp_version", std::string("0.1.0"));
  ckpt.insert("rng_states", rng_states());
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

void Trainer::restore_checkpoint(const std::string& path) {
  LT_CHECK(module_ != nullptr, "Trainer::restore_checkpoint: no module is attached");
  c10::IValue loaded = pickle_load_file(path);
  LT_CHECK_VALUE(loaded.isGenericDict(), "checkpoint '", path, "' is not a lightning-cpp checkpoint (not a dict)");
  auto raw = loaded.toGenericDict();
  LT_CHECK_VALUE(raw.contains("state_dict") && raw.contains("epoch") && raw.contains("global_step"),
                 "checkpoint '", path, "' lacks state_dict/epoch/global_step");
  strategy_->load_module_state(*module_, state_dict_from(loaded, path));
  // Without "epoch_finished" (lightning-cpp before it), "epoch" is the epoch to run next.
  const bool finished = raw.contains("epoch_finished") && raw.at("epoch_finished").toBool();
  state_.current_epoch = raw.at("epoch").toInt() + (finished ? 1 : 0);
  state_.global_step = raw.at("global_step").toInt();
  state_.resume_iteration = raw.contains("epoch_iteration") ? raw.at("epoch_iteration").toInt() : 0;
  if (optim_.optimizer && raw.contains("optimizer")) {
    strategy_->load_optimizer_state(*optim_.optimizer, raw.at("optimizer").toTensor());
  }
  for (size_t i = 1; i < optim_.optimizers.size(); ++i) {
    const std::string key = c10::str("optimizer_", i);
    LT_CHECK_VALUE(raw.contains(key), "checkpoint '", path, "' holds no state for optimizer ", i, " (the module has ",
                   optim_.optimizers.size(), " optimizers)");
    strategy_->load_optimizer_state(*optim_.optimizers[i], raw.at(key).toTensor());
  }
  auto to_state = [](const c10::IValue& v) { return StateDict(v.toGenericDict()); };
  if (optim_.lr_scheduler && raw.contains("lr_scheduler")) {
    optim_.lr_scheduler->load_state_dict(to_state(raw.at("lr_scheduler")));
    if (raw.contains("lr_scheduler_epoch_step_pending") && raw.at("lr_scheduler_epoch_step_pending").toBool()) {
      optim_.lr_scheduler->step();
    }
  }
  if (const std::string key = strategy_->precision().state_key(); raw.contains(key)) {
    strategy_->precision().load_state_dict(to_state(raw.at(key)));
  }
  if (raw.contains("rng_states")) load_rng_states(to_state(raw.at("rng_states")));
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
}

}  // namespace lt
