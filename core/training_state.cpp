#include <lightning_cpp/core/training_state.h>

#include <algorithm>
#include <optional>
#include <variant>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_loops.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/core/version.h>

namespace lt {

namespace {
// Lightning 2.6's layout, which the loops' counters follow (Lightning upgrades older ones; it has nothing to
// upgrade in this one).
constexpr const char* kLightningLayoutVersion = "2.6.0";

// lightning-cpp before Lightning's layout (2026-12): "optimizer", "optimizer_1", ...
std::string legacy_optimizer_key(size_t i) { return i == 0 ? std::string("optimizer") : c10::str("optimizer_", i); }

c10::impl::GenericList any_list() { return c10::impl::GenericList(c10::AnyType::get()); }

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
  // Lightning's entries first, in its order.
  ckpt.insert("epoch", state.current_epoch);
  ckpt.insert("global_step", state.global_step);
  ckpt.insert("pytorch-lightning_version", std::string(kLightningLayoutVersion));
  ckpt.insert("state_dict", strategy.module_state(module));
  LoopsPosition position;
  position.current_epoch = state.current_epoch;
  position.epoch_finished = state.epoch_ended;
  position.epoch_iteration = state.stage == Stage::kTrain ? state.epoch_iteration : 0;
  position.epoch_length = state.epoch_length;
  position.global_step = state.global_step;
  ckpt.insert("loops", lightning_loops(position, module.automatic_optimization()));
  ckpt.insert("callbacks", extras.callbacks ? *extras.callbacks : new_state_dict());
  // optim.optimizer is optimizers[0]; manual optimization's others follow.
  c10::impl::GenericList optimizers = any_list();
  for (const auto& optimizer : optim.optimizers) optimizers.push_back(strategy.optimizer_state(*optimizer));
  ckpt.insert("optimizer_states", optimizers);
  c10::impl::GenericList schedulers = any_list();
  if (optim.lr_scheduler) schedulers.push_back(optim.lr_scheduler->state_dict());
  ckpt.insert("lr_schedulers", schedulers);
  if (StateDict precision = strategy.precision().state_dict(); !precision.empty()) {
    ckpt.insert(strategy.precision().state_key(), precision);  // 16-mixed: the gradient scaler's
  }
  // Lightning's load_from_checkpoint passes "hyper_parameters" to the module's constructor.
  if (!module.hparams().empty()) ckpt.insert("hparams_name", std::string("kwargs"));
  ckpt.insert("hyper_parameters", hparams_state(module.hparams()));
  if (extras.datamodule_hparams) {
    ckpt.insert("datamodule_hyper_parameters", hparams_state(*extras.datamodule_hparams));
  }
  // Ours, beside them: whether the epoch was finished, and where in it, say
  // exactly what the loops' counters say; the rest Lightning has no entry for.
  ckpt.insert("epoch_finished", state.epoch_ended);
  ckpt.insert("world_size", strategy.world_size());
  // Mid-epoch: where the epoch is, so that a resumed run goes on from there
  // (the loader's order is fixed by its seed and the epoch).
  if (state.stage == Stage::kTrain && !state.epoch_ended) ckpt.insert("epoch_iteration", state.epoch_iteration);
  ckpt.insert("lightning_cpp_version", std::string(version()));
  ckpt.insert("rng_states", rng_states());
  if (extras.epoch_samples) ckpt.insert("epoch_samples", *extras.epoch_samples);
  if (extras.logger) ckpt.insert("logger", *extras.logger);
  // Written at a train epoch end (ModelCheckpoint), the checkpoint precedes the
  // fit loop's per-epoch step of a scheduler that follows a metric (the others
  // stepped after the epoch's last batch, as Lightning's); the resumed run
  // takes that step on restore.
  const bool pending = extras.steps_epoch_scheduler && state.epoch_ended && optim.lr_scheduler != nullptr &&
                       optim.interval == Interval::kEpoch && optim.lr_scheduler->monitors_metric() &&
                       (state.current_epoch + 1) % std::max<int64_t>(optim.frequency, 1) == 0;
  ckpt.insert("lr_scheduler_epoch_step_pending", pending);
  // It takes that step with the metric's value at the checkpoint.
  if (pending && state.callback_metrics.count(optim.monitor) != 0) {
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
  state.global_step = raw.at("global_step").toInt();
  if (raw.contains("epoch_finished")) {  // ours
    const bool finished = raw.at("epoch_finished").toBool();
    state.current_epoch = raw.at("epoch").toInt() + (finished ? 1 : 0);
    state.resume_iteration = raw.contains("epoch_iteration") ? raw.at("epoch_iteration").toInt() : 0;
  } else if (raw.contains("loops") && raw.at("loops").isGenericDict()) {  // Lightning's
    const LoopsPosition position = position_from_lightning_loops(raw.at("loops").toGenericDict(), state.global_step,
                                                                 path);
    state.current_epoch = position.current_epoch + (position.epoch_finished ? 1 : 0);
    state.resume_iteration = position.epoch_iteration;
  } else {  // lightning-cpp before "epoch_finished": "epoch" is the epoch to run next
    state.current_epoch = raw.at("epoch").toInt();
    state.resume_iteration = 0;
  }
  // Lightning's "optimizer_states" list, or ours before it ("optimizer", "optimizer_1", ...).
  const bool listed = raw.contains("optimizer_states");
  const std::vector<c10::IValue> optimizer_states =
      listed ? raw.at("optimizer_states").toListRef().vec() : std::vector<c10::IValue>{};
  for (size_t i = 0; i < optim.optimizers.size(); ++i) {
    const std::string key = listed ? c10::str("optimizer_states[", i, "]") : legacy_optimizer_key(i);
    const bool present = listed ? i < optimizer_states.size() : raw.contains(key);
    if (i == 0 && !present) continue;  // weights-only checkpoints: the first optimizer starts afresh
    LT_CHECK_VALUE(present, "checkpoint '", path, "' holds no state for optimizer ", i, " (the module has ",
                   optim.optimizers.size(), " optimizers)");
    strategy.load_optimizer_state(*optim.optimizers[i], listed ? optimizer_states[i] : raw.at(key),
                                  c10::str("checkpoint '", path, "': ", key));
  }
  auto to_state = [](const c10::IValue& v) { return StateDict(v.toGenericDict()); };
  std::optional<StateDict> scheduler;
  if (raw.contains("lr_schedulers") && !raw.at("lr_schedulers").toListRef().empty()) {
    scheduler = to_state(raw.at("lr_schedulers").toListRef()[0]);
  } else if (raw.contains("lr_scheduler")) {
    scheduler = to_state(raw.at("lr_scheduler"));
  }
  if (optim.lr_scheduler && scheduler) {
    optim.lr_scheduler->load_state_dict(*scheduler);
    if (raw.contains("lr_scheduler_epoch_step_pending") && raw.at("lr_scheduler_epoch_step_pending").toBool()) {
      if (!optim.lr_scheduler->monitors_metric()) {
        optim.lr_scheduler->step();  // lightning-cpp before 2026-12 stepped every epoch scheduler after the checkpoint
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
