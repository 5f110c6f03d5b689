#pragma once
// What a checkpoint holds: Lightning 2.6's layout, and ours beside it. The
// file format is the strategy's CheckpointIO's (core/checkpoint_plugin.h; by
// default torch.save's, plugins/io/torch_plugin.h), so Python reads it with
// torch.load, `ckpt["state_dict"]` is what nn.Module.load_state_dict takes,
// Lightning's `load_from_checkpoint` builds the module from it and its
// `Trainer.fit(ckpt_path=...)` resumes it; and we resume Lightning's:
//   {"epoch": int, "global_step": int,              # epoch: current_epoch when saved (Lightning's)
//    "pytorch-lightning_version": "2.6.0",          # the layout's
//    "state_dict": {param/buffer name -> tensor},   # names as PyTorch uses them
//    "loops": {"fit_loop": {...}, ...},              # Lightning's progress counters (core/checkpoint_loops.h)
//    "callbacks": {state_key -> {...}},
//    "optimizer_states": [{"state": ..., "param_groups": [...]}, ...], # PyTorch's optimizer.state_dict()
//                                                    # (core/optimizer_state.h), one per optimizer
//    "lr_schedulers": [{...}],                       # the scheduler's state_dict (PyTorch's names), or []
//    "MixedPrecision": {...},                          # 16-mixed: GradScaler.state_dict(), as Lightning
//    "hparams_name": "kwargs",                         # with hyper-parameters, as Lightning
//    "hyper_parameters": {str -> bool|int|float|str},  # typed, as the module set them
//    "datamodule_hyper_parameters": {...},              # the DataModule's, if any
//    -- ours (Lightning has no entry for them; it ignores them) --
//    "epoch_finished": bool,                           # saved at that epoch's end: resume at the next
//    "world_size": int,                                # the ranks that wrote it
//    "epoch_iteration": int,                           # mid-epoch: iterations done
//    "lightning_cpp_version": str,
//    "rng_states": {"torch": uint8 tensor},           # torch's CPU generator
//    "epoch_samples": {...},                           # mid-epoch: the samples trained (data/epoch_samples.h)
//    "logger": {...},                                  # Logger::state_dict (rank 0's)
//    "lr_scheduler_epoch_step_pending": bool}          # see restore_training_state
// Read back: ours by "epoch_finished" and "epoch_iteration", Lightning's by
// its loops' counters; checkpoints of ours before this layout ("optimizer",
// "optimizer_1"..., "lr_scheduler", "hparams") still load.
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
  // the module's: "datamodule_hyper_parameters".
  std::optional<HParams> datamodule_hparams;
  // The driver steps an epoch-interval scheduler that follows a metric after
  // the epoch's end hooks (the Trainer's fit loop; under Fabric the user steps
  // it): a checkpoint written at an epoch's end then precedes that step
  // ("lr_scheduler_epoch_step_pending").
  bool steps_epoch_scheduler = false;
};

// Inserts into `ckpt` every entry of the layout above but a callback's own
// (the callbacks' states, the logger's, epoch_samples and the DataModule's
// hyper-parameters from `extras`). Entries already in `ckpt` stay. Every
// rank calls it (collectives).
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
