#pragma once
// CheckpointIO: how a checkpoint reaches storage and comes back (Lightning's
// plugins/io/checkpoint_plugin.py). The Strategy owns one (strategy.h's
// checkpoint_io(), Lightning's strategy.checkpoint_io) and decides which rank
// calls it; what a checkpoint holds is assembled above (core/training_state.h).
// The default, lt::TorchCheckpointIO (plugins/io/torch_plugin.h), writes
// torch.save's format; a strategy gets it from the Trainer or Fabric unless
// it was given another:
//
//   auto strategy = std::make_shared<lt::DDPStrategy>();
//   strategy->set_checkpoint_io(std::make_shared<MyCheckpointIO>());
//   lt::Trainer trainer(lt::TrainerOptions().strategy(strategy));
//
// The interface lives in core/ beside Strategy; implementations in plugins/io/.

#include <string>

#include <ATen/core/ivalue.h>

#include <lightning_cpp/core/deferred_tensor.h>

namespace lt {

class CheckpointIO {
 public:
  virtual ~CheckpointIO() = default;
  // Writes `checkpoint` to `path`, which holds the previous checkpoint until
  // the new one is whole. With `deferred`, the checkpoint's placeholders
  // (core/deferred_tensor.h) get their values from it while the file is
  // written; `deferred` is always called to its end (its gathers are
  // collectives), a failure to write is thrown after. Called on the ranks the
  // strategy chooses (the default: global rank 0).
  virtual void save_checkpoint(const c10::IValue& checkpoint, const std::string& path,
                               const DeferredValues& deferred = {}) = 0;
  // Reads what save_checkpoint wrote; a damaged or foreign file is an
  // lt::ValueError naming it. With `placeholders`, values the format keeps
  // apart (a sharded checkpoint's rank files) may stay placeholders that
  // copy_elements reads, so that a rank reads only the parts it needs.
  virtual c10::IValue load_checkpoint(const std::string& path, bool placeholders = false) = 0;
  // Removes a checkpoint save_checkpoint wrote (a file or a sharded folder);
  // one that is not there is no error.
  virtual void remove_checkpoint(const std::string& path) = 0;
};

}  // namespace lt
