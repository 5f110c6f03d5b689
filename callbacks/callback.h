#pragma once
// Callback base class with Lightning's hook names. Hooks carry the same
// arguments everywhere: (Trainer&, LightningModule&, ...). Callbacks run in
// ascending priority() order (ties: the order they were given); the module's
// own hook runs after the callbacks', except on_*_epoch_end where the module
// runs first so that what it logs there is visible to monitoring callbacks.

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "data/dataset.h"
#include "trainer/join_support.h"
#include "trainer/types.h"

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

  virtual void setup(Trainer&, LightningModule&, Stage) {}
  virtual void teardown(Trainer&, LightningModule&, Stage) {}
  virtual void on_fit_start(Trainer&, LightningModule&) {}
  virtual void on_fit_end(Trainer&, LightningModule&) {}
  virtual void on_sanity_check_start(Trainer&, LightningModule&) {}
  virtual void on_sanity_check_end(Trainer&, LightningModule&) {}
  virtual void on_train_start(Trainer&, LightningModule&) {}
  virtual void on_train_end(Trainer&, LightningModule&) {}
  virtual void on_train_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_train_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_train_batch_start(Trainer&, LightningModule&, const Batch&, int64_t /*batch_idx*/) {}
  virtual void on_train_batch_end(Trainer&, LightningModule&, const torch::Tensor& /*loss*/, const Batch&,
                                  int64_t /*batch_idx*/) {}
  virtual void on_validation_start(Trainer&, LightningModule&) {}
  virtual void on_validation_end(Trainer&, LightningModule&) {}
  virtual void on_validation_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_validation_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_validation_batch_start(Trainer&, LightningModule&, const Batch&, int64_t /*batch_idx*/) {}
  virtual void on_validation_batch_end(Trainer&, LightningModule&, const Batch&, int64_t /*batch_idx*/) {}
  virtual void on_test_start(Trainer&, LightningModule&) {}
  virtual void on_test_end(Trainer&, LightningModule&) {}
  virtual void on_test_epoch_start(Trainer&, LightningModule&) {}
  virtual void on_test_epoch_end(Trainer&, LightningModule&) {}
  virtual void on_test_batch_end(Trainer&, LightningModule&, const Batch&, int64_t /*batch_idx*/) {}
  virtual void on_predict_start(Trainer&, LightningModule&) {}
  virtual void on_predict_end(Trainer&, LightningModule&) {}
  virtual void on_before_backward(Trainer&, LightningModule&, const torch::Tensor& /*loss*/) {}
  virtual void on_after_backward(Trainer&, LightningModule&) {}
  virtual void on_before_optimizer_step(Trainer&, LightningModule&, torch::optim::Optimizer&) {}
  virtual void on_before_zero_grad(Trainer&, LightningModule&, torch::optim::Optimizer&) {}
  virtual void on_save_checkpoint(Trainer&, LightningModule&, StateDict& /*checkpoint*/) {}
  virtual void on_load_checkpoint(Trainer&, LightningModule&, const StateDict& /*checkpoint*/) {}
  virtual void on_exception(Trainer&, LightningModule&, const std::exception&) {}

  virtual StateDict state_dict() const { return new_state_dict(); }
  virtual void load_state_dict(const StateDict& /*state*/) {}
};

}  // namespace lt
