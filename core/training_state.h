#pragma once
// What a checkpoint holds. The file format is the strategy's CheckpointIO's
// (core/checkpoint_plugin.h; by default torch.save's, plugins/io/torch_plugin.h),
// so Python reads it with torch.load and `ckpt["state_dict"]` is what
// nn.Module.load_state_dict takes:
//   {"state_dict": {param/buffer name -> tensor},   # names as PyTorch uses them
//    "epoch": int, "global_step": int,               # epoch: current_epoch when saved (Lightning's)
//    "epoch_finished": bool,                           # saved at that epoch's end: resume at the next
//    "optimizer": {"state": ..., "param_groups": [...]}, # PyTorch's optimizer.state_dict()
//                                                    # (core/optimizer_state.h); "optimizer_1"... under
//                                                    # manual optimization's several optimizers
//    "lr_scheduler": {...}, "callbacks": {state_key -> {...}},
//    "MixedPrecision": {...},                          # 16-mixed: GradScaler.state_dict(), as Lightning
//    "hparams": {str -> bool|int|float|str},          # typed, as the module set them
//    "lightning_cpp_version": str,
//    "rng_states": {"torch": uint8 tensor},           # torch's CPU generator
//    "lr_scheduler_epoch_step_pending": bool,          # see Trainer::restore_checkpoint
//    "epoch_iteration": int,                           # mid-epoch: iterations done
//    "world_size": int,                                # the ranks that wrote it
//    "epoch_samples": {...},                           # mid-epoch: the samples trained (data/epoch_samples.h)
//    "logger": {...}}                                  # Logger::state_dict (rank 0's)
// Callbacks add to it in on_save_checkpoint.
// Every entry is written here, in one place, for both drivers of a run (the
// Trainer and Fabric): the module's and optimizers' state through the
// strategy (consolidated where sharded), the scheduler, the precision's
// state, the counters, the RNG, the hparams, and what only one driver has
// (callbacks, the logger, epoch_samples), which it hands in as CheckpointExtras.

#include <optional>
#include <string>

#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/types.h>

namespace lt {

// What only some drivers of a run have.
struct CheckpointExtras {
  // Mid-epoch: the samples trained (data/epoch_samples.h).
  std::optional<StateDict> epoch_samples;
  // The callbacks' states by state_key; none: an empty dict.
  std::optional<StateDict> callbacks;
  // Logger::state_dict (rank 0's).
  std::optional<StateDict> logger;
  // The DataModule's hyper-parameters (the Trainer's fit with one), beside
  // the module's "hparams" (Lightning's datamodule_hyper_parameters).
  std::optional<HParams> datamodule_hparams;
  // The driver steps an epoch-interval scheduler at each epoch's end (the
  // Trainer's fit loop; under Fabric the user steps it): a checkpoint written
  // at an epoch's end then precedes that step ("lr_scheduler_epoch_step_pending").
  bool steps_epoch_scheduler = false;
};

// Inserts into `ckpt` every entry of the layout above but a callback's own:
// state_dict, epoch, epoch_finished, global_step, world_size, epoch_iteration
// (mid-epoch of a training run), optimizer[_i], lr_scheduler, the precision's
// state, lightning_cpp_version, rng_states, then `extras`' (epoch_samples,
// callbacks, logger), hparams, datamodule_hparams (from `extras`) and
// lr_scheduler_epoch_step_pending. Entries
// already in `ckpt` stay. Every rank calls it (collectives).
void dump_training_state(StateDict& ckpt, Strategy& strategy, LightningModule& module, const OptimizerConfig& optim,
                         const RunState& state, const CheckpointExtras& extras = {});

// Reads what dump_training_state wrote from the checkpoint `loaded` (read
// from `path`), into the module, the optimizers, the scheduler (taking the
// epoch step a checkpoint written at an epoch's end precedes), the
// precision, the counters and the RNG. Throws lt::ValueError naming `path`
// for a file that is not such a checkpoint. Returns the checkpoint's dict.
StateDict restore_training_state(const c10::IValue& loaded, const std::string& path, Strategy& strategy,
                                 LightningModule& module, OptimizerConfig& optim, RunState& state);

}  // namespace lt
