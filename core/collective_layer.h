#pragma once
// A layer whose training forward (and backward) issue collectives across
// ranks, e.g. lt::SyncBatchNorm (plugins/layer_sync/sync_batch_norm.h), and
// that can shadow them: the module-level way to declare collectives in
// forward so that they train under Join without throw_on_early_termination.
//
// The DDP strategy finds every CollectiveLayer of the module at setup, in
// registration order (the LightningModule itself may be one), and gives each
// its layer-sync process group: a group of their own, so that their blocking
// collectives never interleave with DDP's asynchronous gradient buckets.
// Under Join, a rank with no micro-batch in an iteration (joined, or padding
// its last accumulation window) calls shadow_forward() on every layer in
// registration order, then shadow_backward() in reverse order, where the
// other ranks run forward and backward; each must issue the same collectives
// as the layer's forward (backward) with neutral values. So a model must run
// these layers in the order it registers them.

#include <cstdint>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

namespace lt {

class CollectiveLayer {
 public:
  virtual ~CollectiveLayer() = default;
  // The group to issue collectives on (null: one process, no collective) and
  // this layer's index among the module's collective layers.
  virtual void set_process_group(c10::intrusive_ptr<c10d::ProcessGroup> process_group, int64_t layer_index) = 0;
  virtual void shadow_forward() = 0;
  virtual void shadow_backward() {}
};

// The module's collective layers, in registration order (the module first).
std::vector<CollectiveLayer*> collective_layers(torch::nn::Module& module);

}  // namespace lt
