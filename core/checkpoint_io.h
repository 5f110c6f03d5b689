#pragma once
// Checkpoint file layout (one file, written with torch::pickle_save so that
// Python's torch.load reads it):
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
//    "lr_scheduler_epoch_step_pending": bool,          # see restore_checkpoint
//    "epoch_iteration": int,                           # mid-epoch: iterations done
//    "logger": {...}}                                  # Logger::state_dict (rank 0's)
// Callbacks add to it in on_save_checkpoint; Python reads it with torch.load
// and `ckpt["state_dict"]` is what nn.Module.load_state_dict takes.

#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/types.h>

namespace lt {

// Parameters and buffers by their dotted names, like nn.Module.state_dict().
c10::Dict<std::string, torch::Tensor> module_state_dict(const torch::nn::Module& module);
// Copies tensors into the module's parameters and buffers; strict: every name must match.
void load_module_state_dict(torch::nn::Module& module, const c10::Dict<std::string, torch::Tensor>& state,
                            bool strict = true);

// Loads a module's weights from `path`: a lightning-cpp checkpoint (its
// "state_dict") or a bare state_dict saved by Python's torch.save(model.state_dict()).
void load_weights(torch::nn::Module& module, const std::string& path, bool strict = true);
// The {name -> tensor} dict inside `loaded` (a checkpoint or a bare state_dict).
c10::Dict<std::string, torch::Tensor> state_dict_from(const c10::IValue& loaded, const std::string& path);

// Writes `value` to `path` atomically (core/files.h's FileReplacement: a
// failure names the file and the OS error, and leaves `path` as it was),
// streamed: each tensor goes to the file from its own memory, so the file is
// never whole in memory. The bytes are torch::pickle_save's.
void atomic_pickle_save(const c10::IValue& value, const std::string& path);
// Reads what atomic_pickle_save (or torch.save) wrote, each record straight
// into its tensor. A file that is no zip archive, whose zip directory is
// damaged or one of whose records fails its CRC-32 check (LibTorch's reader
// checks none of it) is a ValueError naming the record;
// check_checkpoint_file does the same checks alone.
c10::IValue pickle_load_file(const std::string& path);
void check_checkpoint_file(const std::string& path);

// A checkpoint's "rng_states" (torch's CPU generator, which dropout and
// friends draw from: a resumed run continues its stream), and back.
StateDict rng_states();
void load_rng_states(const StateDict& states);

// Optimizer state as bytes (LibTorch's archive format) and back: what
// core/optimizer_state.h keeps for an optimizer PyTorch's layout does not name.
torch::Tensor optimizer_to_bytes(torch::optim::Optimizer& optimizer);
void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const torch::Tensor& bytes);

}  // namespace lt
