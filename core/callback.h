#pragma once
// Callback base class with Lightning's hook names. Hooks carry the same
// arguments everywhere: (Trainer&, LightningModule&, ...). Callbacks run in
// ascending priority() order (ties: the order they were given); the module's
// own hook runs after the callbacks', except on_*_epoch_end where the module
// runs first so that what it logs there is visible to monitoring callbacks.
//
// on_after_optimizer_step (not a Lightning hook): once after each batch in
// which global_step advanced, after on_train_batch_end; under lockstep Join
// also on a rank in padding or joined, at the same point of the step as the
// ranks still training. Step-cadence work that issues collectives belongs
// here (ModelCheckpoint every_n_train_steps, Timer interval step).

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include <lightning_cpp/core/join_support.h>
#include <lightning_cpp/core/types.h>

// Every hook, listed once: its name, its parameters and the arguments that
// pass them on. The Callback virtuals, LambdaCallback's functions and the
// tests' recorder are generated from this list. Every hook's first two
// parameters are the same (LT_HOOK_PARAMS).
#define LT_HOOK_PARAMS ::lt::Trainer &trainer, ::lt::LightningModule &module
#define LT_CALLBACK_HOOKS(X)                                                                                           \
  X(setup, (LT_HOOK_PARAMS, ::lt::Stage stage), (trainer, module, stage))                                              \
  X(teardown, (LT_HOOK_PARAMS, ::lt::Stage stage), (trainer, module, stage))                                           \
  X(on_fit_start, (LT_HOOK_PARAMS), (trainer, module))                                                                 \
  X(on_fit_end, (LT_HOOK_PARAMS), (trainer, module))                                                                   \
  X(on_sanity_check_start, (LT_HOOK_PARAMS), (trainer, module))                                                        \
  X(on_sanity_check_end, (LT_HOOK_PARAMS), (trainer, module))                                                          \
  X(on_train_start, (LT_HOOK_PARAMS), (trainer, module))                                                               \
  X(on_train_end, (LT_HOOK_PARAMS), (trainer, module))                                                                 \
  X(on_train_epoch_start, (LT_HOOK_PARAMS), (trainer, module))                                                         \
  X(on_train_epoch_end, (LT_HOOK_PARAMS), (trainer, module))                                                           \
  X(on_train_batch_start, (LT_HOOK_PARAMS, const ::lt::Batch& batch, int64_t batch_idx),                               \
    (trainer, module, batch, batch_idx))                                                                               \
  X(on_train_batch_end, (LT_HOOK_PARAMS, const torch::Tensor& loss, const ::lt::Batch& batch, int64_t batch_idx),      \
    (trainer, module, loss, batch, batch_idx))                                                                         \
  X(on_validation_start, (LT_HOOK_PARAMS), (trainer, module))                                                          \
  X(on_validation_end, (LT_HOOK_PARAMS), (trainer, module))                                                            \
  X(on_validation_epoch_start, (LT_HOOK_PARAMS), (trainer, module))                                                    \
  X(on_validation_epoch_end, (LT_HOOK_PARAMS), (trainer, module))                                                      \
  X(on_validation_batch_start, (LT_HOOK_PARAMS, const ::lt::Batch& batch, int64_t batch_idx),                          \
    (trainer, module, batch, batch_idx))                                                                               \
  X(on_validation_batch_end, (LT_HOOK_PARAMS, const ::lt::Batch& batch, int64_t batch_idx),                            \
    (trainer, module, batch, batch_idx))                                                                               \
  X(on_test_start, (LT_HOOK_PARAMS), (trainer, module))                                                                \
  X(on_test_end, (LT_HOOK_PARAMS), (trainer, module))                                                                  \
  X(on_test_epoch_start, (LT_HOOK_PARAMS), (trainer, module))                                                          \
  X(on_test_epoch_end, (LT_HOOK_PARAMS), (trainer, module))                                                            \
  X(on_test_batch_end, (LT_HOOK_PARAMS, const ::lt::Batch& batch, int64_t batch_idx),                                  \
    (trainer, module, batch, batch_idx))                                                                               \
  X(on_predict_start, (LT_HOOK_PARAMS), (trainer, module))                                                             \
  X(on_predict_end, (LT_HOOK_PARAMS), (trainer, module))                                                               \
  X(on_before_backward, (LT_HOOK_PARAMS, const torch::Tensor& loss), (trainer, module, loss))                          \
  X(on_after_backward, (LT_HOOK_PARAMS), (trainer, module))                                                            \
  X(on_before_optimizer_step, (LT_HOOK_PARAMS, torch::optim::Optimizer& optimizer), (trainer, module, optimizer))      \
  X(on_before_zero_grad, (LT_HOOK_PARAMS, torch::optim::Optimizer& optimizer), (trainer, module, optimizer))           \
  X(on_after_optimizer_step, (LT_HOOK_PARAMS), (trainer, module))                                                      \
  X(on_save_checkpoint, (LT_HOOK_PARAMS, ::lt::StateDict& checkpoint), (trainer, module, checkpoint))                  \
  X(on_load_checkpoint, (LT_HOOK_PARAMS, const ::lt::StateDict& checkpoint), (trainer, module, checkpoint))            \
  X(on_exception, (LT_HOOK_PARAMS, const std::exception& exception), (trainer, module, exception))

namespace lt {

class Trainer;
class LightningModule;
struct TrainerOptions;

class Callback {
 public:
  virtual ~Callback() = default;

  // Key of this callback's state in a checkpoint; unique within a run.
  virtual std::string state_key() const { return name(); }
  virtual std::string name() const = 0;
  // Lower runs first. Monitoring callbacks (EarlyStopping, ModelCheckpoint)
  // use kMonitorPriority so that they see the metrics others logged.
  virtual int priority() const { return 0; }
  static constexpr int kMonitorPriority = 100;

  // How this callback behaves under Join (uneven inputs); see join_support.h.
  virtual JoinSupport join_support(const TrainerOptions& /*options*/) const { return JoinSupport::compatible(); }

#define LT_DECLARE_HOOK(name, params, args) \
  virtual void name params {}
  LT_CALLBACK_HOOKS(LT_DECLARE_HOOK)
#undef LT_DECLARE_HOOK

  virtual StateDict state_dict() const { return new_state_dict(); }
  virtual void load_state_dict(const StateDict& /*state*/) {}

  // A checkpointing callback's answer to ckpt_path "last" (its newest
  // checkpoint) or "best" (its best one): a path, or empty.
  virtual std::string checkpoint_path(const std::string& /*which*/) const { return {}; }
  // The folder checkpoint_path looks in (after setup), named when it finds
  // nothing; empty for a callback that keeps no checkpoints.
  virtual std::string checkpoint_dir() const { return {}; }
};

}  // namespace lt
