#pragma once
// What a loop gets: the run's state, the strategy, the module, the logging
// results and a dispatcher for callback hooks. Loops never see the Trainer
// (STYLE.md: narrow contexts instead of connectors).

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/profiler.h>
#include <lightning_cpp/core/result_collection.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/data/data_loader.h>

namespace lt {

// Calls a hook on every callback, in priority order, with (Trainer&, module&, args...).
// A hook's name ("on_train_epoch_end") from its member pointer, for profiling.
template <typename Hook>
const char* hook_name(Hook hook) {
#define LT_HOOK_NAME(name, params, args)                                    \
  if constexpr (std::is_same_v<Hook, decltype(&Callback::name)>) {          \
    if (hook == &Callback::name) return #name;                              \
  }
  LT_CALLBACK_HOOKS(LT_HOOK_NAME)
#undef LT_HOOK_NAME
  return "hook";
}

class CallbackHooks {
 public:
  CallbackHooks(Trainer& trainer, LightningModule& module, std::vector<std::shared_ptr<Callback>> callbacks,
                RunState& state)
      : trainer_(trainer), module_(module), callbacks_(std::move(callbacks)), state_(state) {}

  template <typename... HookArgs, typename... Args>
  void call(void (Callback::*hook)(Trainer&, LightningModule&, HookArgs...), Args&&... args) {
    for (auto& callback : callbacks_) {
      state_.running_callback = callback.get();
      ProfileScope scope(profiler_, "[Callback]", profiler_ ? callback->name() + "." + hook_name(hook) : "", "");
      ((*callback).*hook)(trainer_, module_, args...);
    }
    state_.running_callback = nullptr;
  }
  void set_profiler(Profiler* profiler) { profiler_ = profiler; }
  const std::vector<std::shared_ptr<Callback>>& callbacks() const { return callbacks_; }

 private:
  Trainer& trainer_;
  LightningModule& module_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  RunState& state_;
  Profiler* profiler_ = nullptr;
};

struct LoopContext {
  const TrainerOptions& options;
  RunState& state;
  Strategy& strategy;
  LightningModule& module;
  CallbackHooks& hooks;
  Logger* logger;  // null on ranks other than 0
  std::map<Stage, ResultCollection>& results;
  OptimizerConfig* optim;  // null outside fit
  Profiler* profiler = nullptr;  // TrainerOptions::profiler, if any

  // Points the module's log() at the results of `stage`.
  ResultCollection& use_results(Stage stage, bool in_step_hook) {
    ResultCollection& r = results[stage];
    r.set_stage(stage, in_step_hook);
    detail::ModuleAccess::use_results(module, &r);
    return r;
  }
  // Sends metrics to the logger at the current global step (rank 0 only),
  // with `epoch` (current_epoch) added unless the module logged one: what
  // Lightning's logger connector adds to every dict it gives the loggers.
  void log_metrics(const std::map<std::string, double>& metrics) {
    if (metrics.empty()) return;
    for (const auto& [k, v] : metrics) state.logged_metrics[k] = v;
    if (logger == nullptr || state.sanity_checking) return;
    std::map<std::string, double> with_epoch = metrics;
    with_epoch.emplace("epoch", static_cast<double>(state.current_epoch));
    logger->log_metrics(with_epoch, state.global_step);
  }
};

}  // namespace lt
