#pragma once
// Callback base class with Lightning's hook names. Hooks carry the same
// arguments everywhere: (Trainer&, LightningModule&, ...). Callbacks run in
// ascending priority() order (ties: the order they were given); the module's
// own hook runs after the callbacks', except on_*_epoch_end where the module
// runs first so that what it logs there is visible to monitoring callbacks.

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include <lightning_cpp/core/join_support.h>
#include <lightning_cpp/core/types.h>

// Every hook, listed once: its name, its parameters and the arguments that
// pass them on. The Callback virtuals, LambdaCallback's functions and the
// tests' recorder are generated from this list.
#define LT_CALLBACK_HOOKS(X)                                                                                    \
  X(setup, (Trainer & trainer, LightningModule & module, Stage stage), (trainer, module, stage))              \
  X(teardown, (Trainer & trainer, LightningModule & module, Stage stage), (trainer, module, stage))           \
  X(on_fit_start, (Trainer & trainer, LightningModule & module), (trainer, module))                           \
  X(on_fit_end, (Trainer & trainer, LightningModule & module), (trainer, module))                             \
  X(on_sanity_check_start, (Trainer & trainer, LightningModule & module), (trainer, module))                  \
  X(on_sanity_check_end, (Trainer & trainer, LightningModule & module), (trainer, module))                    \
  X(on_train_start, (Trainer & trainer, LightningModule & module), (trainer, module))                         \
  X(on_train_end, (Trainer & trainer, LightningModule & module), (trainer, module))                           \
  X(on_train_epoch_start, (Trainer & trainer, LightningModule & module), (trainer, module))                   \
  X(on_train_epoch_end, (Trainer & trainer, LightningModule & module), (trainer, module))                     \
  X(on_train_batch_start, (Trainer & trainer, LightningModule & module, const Batch& batch, int64_t batch_idx), \
    (trainer, module, batch, batch_idx))                                                                      \
  X(on_train_batch_end,                                                                                       \
    (Trainer & trainer, LightningModule & module, const torch::Tensor& loss, const Batch& batch,              \
     int64_t batch_idx),                                                                                      \
    (trainer, module, loss, batch, batch_idx))                                                                \
  X(on_validation_start, (Trainer & trainer, LightningModule & module), (trainer, module))                    \
  X(on_validation_end, (Trainer & trainer, LightningModule & module), (trainer, module))                      \
  X(on_validation_epoch_start, (Trainer & trainer, LightningModule & module), (trainer, module))              \
  X(on_validation_epoch_end, (Trainer & trainer, LightningModule & module), (trainer, module))                \
  X(on_validation_batch_start,                                                                                \
    (Trainer & trainer, LightningModule & module, const Batch& batch, int64_t batch_idx),                     \
    (trainer, module, batch, batch_idx))                                                                      \
  X(on_validation_batch_end, (Trainer & trainer, LightningModule & module, const Batch& batch, int64_t batch_idx), \
    (trainer, module, batch, batch_idx))                                                                      \
  X(on_test_start, (Trainer & trainer, LightningModule & module), (trainer, module))                          \
  X(on_test_end, (Trainer & trainer, LightningModule & module), (trainer, module))                            \
  X(on_test_epoch_start, (Trainer & trainer, LightningModule & module), (trainer, module))                    \
  X(on_test_epoch_end, (Trainer & trainer, LightningModule & module), (trainer, module))                      \
  X(on_test_batch_end, (Trainer & trainer, LightningModule & module, const Batch& batch, int64_t batch_idx),  \
    (trainer, module, batch, batch_idx))                                                                      \
  X(on_predict_start, (Trainer & trainer, LightningModule & module), (trainer, module))                       \
  X(on_predict_end, (Trainer & trainer, LightningModule & module), (trainer, module))                         \
  X(on_before_backward, (Trainer & trainer, LightningModule & module, const torch::Tensor& loss),             \
    (trainer, module, loss))                                                                                  \
  X(on_after_backward, (Trainer & trainer, LightningModule & module), (trainer, module))                      \
  X(on_before_optimizer_step, (Trainer & trainer, LightningModule & module, torch::optim::Optimizer & optimizer), \
    (trainer, module, optimizer))                                                                             \
  X(on_before_zero_grad, (Trainer & trainer, LightningModule & module, torch::optim::Optimizer & optimizer),  \
    (trainer, module, optimizer))                                                                             \
  X(on_save_checkpoint, (Trainer & trainer, LightningModule & module, StateDict & checkpoint),                \
    (trainer, module, checkpoint))                                                                            \
  X(on_load_checkpoint, (Trainer & trainer, LightningModule & module, const StateDict& checkpoint),           \
    (trainer, module, checkpoint))                                                                            \
  X(on_exception, (Trainer & trainer, LightningModule & module, const std::exception& exception),             \
    (trainer, module, exception))

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
};

}  // namespace lt
