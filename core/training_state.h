#pragma once
// The part of a checkpoint (core/checkpoint_io.h's layout) that every driver
// of a run writes and reads alike, the Trainer and Fabric: the module's and
// optimizers' state through the strategy (consolidated where sharded), the
// scheduler, the precision's state, the counters and the RNG. What only one
// driver has (callbacks, the logger, hparams) it adds itself.

#include <string>

#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/core/types.h>

namespace lt {

// Inserts into `ckpt`: state_dict, epoch, epoch_finished, global_step, world_size,
// epoch_iteration (mid-epoch of a training run), optimizer[_i], lr_scheduler,
// the precision's state, lightning_cpp_version, rng_states. Every rank calls it (collectives).
void dump_training_state(StateDict& ckpt, Strategy& strategy, LightningModule& module, const OptimizerConfig& optim,
                         const RunState& state);

// Reads what dump_training_state wrote from the checkpoint `loaded` (read
// from `path`), into the module, the optimizers, the scheduler (taking the
// epoch step a checkpoint written at an epoch's end precedes), the
// precision, the counters and the RNG. Throws lt::ValueError naming `path`
// for a file that is not such a checkpoint. Returns the checkpoint's dict.
StateDict restore_training_state(const c10::IValue& loaded, const std::string& path, Strategy& strategy,
                                 LightningModule& module, OptimizerConfig& optim, RunState& state);

}  // namespace lt
