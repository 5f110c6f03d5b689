#pragma once
// lt::Tuner (Lightning's tuner/tuning.py): runs a tuning sweep on a Trainer's
// setup before the real fit, and leaves the module as it found it.
//
//   lt::Trainer trainer(options);
//   lt::LRFinder sweep = lt::Tuner(trainer).lr_find(model, train);
//   sweep.plot(trainer.log_dir() + "/lr_find.svg");
//   model->set_lr(sweep.suggestion().value_or(1e-3));   // or update_attr: the module's hparams
//   trainer.fit(model, train, val);
//
// The sweep is a fit of its own on the Trainer's strategy (its processes and
// process group: under a local spawn the workers run it too, before the real
// fit) with the Trainer's options but for: num_training steps, no validation,
// no logger, no profiler, no callback of the user's (no checkpoint), and the optimizer
// configure_optimizers returns taking the sweep's rates (its scheduler set
// aside). Afterwards the module's parameters and buffers are the ones it
// came with (restored also when the sweep fails); the real fit configures
// its optimizer anew. Every rank ends with the same LRFinder. Under uneven
// inputs the sweep needs lockstep Join (it agrees on each step's loss after
// the step).

#include <memory>

#include <lightning_cpp/tuner/lr_finder.h>

namespace lt {

class Trainer;
class LightningModule;
class DataLoader;
class DataModule;

class Tuner {
 public:
  explicit Tuner(Trainer& trainer) : trainer_(trainer) {}

  LRFinder lr_find(const std::shared_ptr<LightningModule>& module, std::shared_ptr<DataLoader> train,
                   const LRFinderOptions& options = {});
  LRFinder lr_find(const std::shared_ptr<LightningModule>& module, const std::shared_ptr<DataModule>& data,
                   const LRFinderOptions& options = {});

 private:
  Trainer& trainer_;
};

}  // namespace lt
