#pragma once
// Forwarding header, kept for one release (0.2.x; gone in 0.3): checkpoint I/O moved
// to plugins/io/ (the strategy's CheckpointIO); core/ keeps the vocabulary.
// Include what you use instead:
//   module_state_dict, load_module_state_dict, state_dict_from, tensor_list,
//   rng_states, load_rng_states                        core/state_dict.h
//   deferred_tensor, is_deferred, DeferredValues, copy_elements, materialized
//                                                      core/deferred_tensor.h
//   optimizer_to_bytes, optimizer_from_bytes           core/optimizer_state.h
//   atomic_pickle_save, write_pickle_archive, pickle_load_file,
//   check_checkpoint_file, load_weights, TorchCheckpointIO
//                                                      plugins/io/torch_plugin.h
//   ShardedPlace, is_sharded_checkpoint, shard_file_name, write_sharded_meta
//                                                      plugins/io/sharded_checkpoint.h
// What a checkpoint holds: core/training_state.h.
// It includes plugins/io from core/: scripts/check_layering.py counts it as
// part of plugins/io, so no file below plugins/io may include it.

#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/plugins/io/sharded_checkpoint.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
