#include <lightning_cpp/core/training_state.h>

#include <algorithm>
#include <variant>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/core/version.h>

namespace lt {

namespace {
std::string optimizer_key(size_t i) { return i == 0 ? std::string("optimizer") : c10::str("optimizer_", i); }

StateDict hparams_state(const HParams& hparams) {
  StateDict out = new_state_dict();
  for (const auto& [k, v] : hparams) {
    std::visit([&, key = k](const auto& value) { out.insert(key, value); }, v.value());
  }
  return out;
}
}  // namespace

void dump_training_state(StateDict& ckpt, Strategy& strategy, LightningModule& module, const OptimizerConfig& optim,
                         const RunState& state, const CheckpointExtras& extras) {
  ckpt.insert("state_dict", strategy.module_state(module));
  // Lightning's "epoch": the epoch during which the checkpoint was saved, at
  // its end too; whether it was finished (Lightning keeps that in its loops'
  // progress) is what says where a resumed run starts.
  ckpt.insert("epoch", state.current_epoch);
  ckpt.insert("epoch_finished", state.epoch_ended);
  ckpt.insert("global_step", state.global_step);
  ckpt.insert("world_size", strategy.world_size());
  // Mid-epoch: where the epoch is, so that a resumed run goes on from there
  // (the loader's order is fixed by its seed and the epoch).
  if (state.stage == Stage::kTrain && !state.epoch_ended) ckpt.insert("epoch_iteration", state.epoch_iteration);
  // optim.optimizer is optimizers[0]; manual optimization's others follow.
  for (size_t i = 0; i < optim.optimizers.size(); ++i) {
    ckpt.insert(optimizer_key(i), strategy.optimizer_state(*optim.optimizers[i]));
  }
  if (optim.lr_scheduler) ckpt.insert("lr_scheduler", optim.lr_scheduler->state_dict());
  if (StateDict precision = strategy.precision().state_dict(); !precision.empty()) {
    ckpt.insert(strategy.precision().state_key(), precision);  // 16-mixed: the gradient scaler's
  }
  ckpt.insert("lightning_cpp_version", std::string(version()));
  ckpt.insert("rng_states", rng_states());
  if (extras.epoch_samples) ckpt.insert("epoch_samples", *extras.epoch_samples);
  ckpt.insert("callbacks", extras.callbacks ? *extras.callbacks : new_state_dict());
  if (extras.logger) ckpt.insert("logger", *extras.logger);
  ckpt.insert("hparams", hparams_state(module.hparams()));
  if (extras.datamodule_hparams) ckpt.insert("datamodule_hparams", hparams_state(*extras.datamodule_hparams));
  // Written at a train epoch end (ModelCheckpoint), the checkpoint precedes the
  // fit loop's per-epoch scheduler step; the resumed run takes that step on restore.
  const bool pending = extras.steps_epoch_scheduler && state.epoch_ended && optim.lr_scheduler != nullptr &&
                       optim.interval == Interval::kEpoch &&
                       (state.current_epoch + 1) % std::max<int64_t>(optim.frequency, 1) == 0;
  ckpt.insert("lr_scheduler_epoch_step_pending", pending);
  // A scheduler that follows a metric takes that step with the metric's value at the checkpoint.
  if (pending && optim.lr_scheduler->monitors_metric() && state.callback_metrics.count(optim.monitor) != 0) {
    ckpt.insert("lr_scheduler_epoch_step_metric", state.callback_metrics.at(optim.monitor));
  }
}

StateDict restore_training_state(const c10::IValue& loaded, const std::string& path, Strategy& strategy,
                                 LightningModule& module, OptimizerConfig& optim, RunState& state) {
  LT_CHECK_VALUE(loaded.isGenericDict(), "checkpoint '", path, "' is not a lightning-cpp checkpoint (not a dict)");
  StateDict raw = loaded.toGenericDict();
  LT_CHECK_VALUE(raw.contains("state_dict") && raw.contains("epoch") && raw.contains("global_step"),
                 "checkpoint '", path, "' lacks state_dict/epoch/global_step");
  strategy.load_module_state(module, state_dict_from(loaded, path));
  // Without "epoch_finished" (lightning-cpp before it), "epoch" is the epoch to run next.
  const bool finished = raw.contains("epoch_finished") && raw.at("epoch_finished").toBool();
  state.current_epoch = raw.at("epoch").toInt() + (finished ? 1 : 0);
  state.global_step = raw.at("global_step").toInt();
  state.resume_iteration = raw.contains("epoch_iteration") ? raw.at("epoch_iteration").toInt() : 0;
  for (size_t i = 0; i < optim.optimizers.size(); ++i) {
    const std::string key = optimizer_key(i);
    if (i == 0 && !raw.contains(key)) continue;  // weights-only checkpoints: the first optimizer starts afresh
    LT_CHECK_VALUE(raw.contains(key), "checkpoint '", path, "' holds no state for optimizer ", i, " (the module has ",
                   optim.optimizers.size(), " optimizers)");
    strategy.load_optimizer_state(*optim.optimizers[i], raw.at(key), c10::str("checkpoint '", path, "': ", key));
  }
  auto to_state = [](const c10::IValue& v) { return StateDict(v.toGenericDict()); };
  if (optim.lr_scheduler && raw.contains("lr_scheduler")) {
    optim.lr_scheduler->load_state_dict(to_state(raw.at("lr_scheduler")));
    if (raw.contains("lr_scheduler_epoch_step_pending") && raw.at("lr_scheduler_epoch_step_pending").toBool()) {
      if (!optim.lr_scheduler->monitors_metric()) {
        optim.lr_scheduler->step();
      } else if (raw.contains("lr_scheduler_epoch_step_metric")) {
        optim.lr_scheduler->step(raw.at("lr_scheduler_epoch_step_metric").toDouble());
      }
    }
  }
  if (const std::string key = strategy.precision().state_key(); raw.contains(key)) {
    strategy.precision().load_state_dict(to_state(raw.at(key)));
  }
  if (raw.contains("rng_states")) load_rng_states(to_state(raw.at("rng_states")));
  return raw;
}

}  // namespace lt
