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
//    "world_size": int,                                # the ranks that wrote it
//    "epoch_samples": {...},                           # mid-epoch: the samples trained (data/epoch_samples.h)
//    "logger": {...}}                                  # Logger::state_dict (rank 0's)
// Callbacks add to it in on_save_checkpoint; Python reads it with torch.load
// and `ckpt["state_dict"]` is what nn.Module.load_state_dict takes.

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/core/types.h>

namespace lt {

// Loads a module's weights from `path`: a lightning-cpp checkpoint (its
// "state_dict") or a bare state_dict saved by Python's torch.save(model.state_dict()).
void load_weights(torch::nn::Module& module, const std::string& path, bool strict = true);
// Writes `value` to `path` atomically (core/files.h's FileReplacement: a
// failure names the file and the OS error, and leaves `path` as it was),
// streamed: each tensor goes to the file from its own memory, so the file is
// never whole in memory. The bytes are torch::pickle_save's (records over
// 4 GiB with miniz's zip64 fields). With `deferred`, the placeholders' records
// are written as it hands them over (after the others': the records' order
// differs from torch::pickle_save's, torch.load reads them by name); a
// failure to write is thrown once `deferred` has returned, so that it always
// finishes its collectives.
void atomic_pickle_save(const c10::IValue& value, const std::string& path, const DeferredValues& deferred = {});
// The same archive, to any sink (atomic_pickle_save's file).
void write_pickle_archive(const c10::IValue& value, const std::function<void(const void*, size_t)>& sink,
                          const DeferredValues& deferred = {});
// Reads what atomic_pickle_save (or torch.save) wrote, each record straight
// into its tensor. A file that is no zip archive, whose zip directory is
// damaged or one of whose records fails its CRC-32 check (LibTorch's reader
// checks none of it) is a ValueError naming the record;
// check_checkpoint_file does the same checks alone.
// Either reads a sharded checkpoint's folder too (below). With
// `placeholders`, a sharded checkpoint's values that its rank files hold stay
// there: each is a placeholder (is_deferred) that copy_elements reads from
// them, so that a rank reads only the parts it needs.
c10::IValue pickle_load_file(const std::string& path, bool placeholders = false);
void check_checkpoint_file(const std::string& path);

// A sharded checkpoint (fsdp's state_dict_type sharded) is a folder: a file
// per rank, written by the ranks at once (shard_R_of_W-TOKEN.pt: a tuple of
// the rank's parts, which torch.load reads), and meta.pt, global rank 0's,
// written last: the checkpoint with every tensor's record but the
// placeholders' (deferred_tensor), and a record "sharded.pkl" that names the
// rank files and places each placeholder's value: elements [offset, offset +
// numel) of part `part` of the rank files put end to end in rank order.
// meta.pt is replaced atomically and names the files of its own save, so a
// save killed midway leaves the previous checkpoint whole. pickle_load_file
// reads it as it reads a file (a value a view of a rank file where it lies in
// one part, else copied together), so a checkpoint of any world size loads
// into any world size and strategy.
struct ShardedPlace {
  torch::Tensor placeholder;
  int64_t part;
  int64_t offset;
};
bool is_sharded_checkpoint(const std::string& path);
// Rank `rank`'s file of the save `token` (the same on every rank).
std::string shard_file_name(int64_t rank, int64_t world_size, uint64_t token);
// Writes `dir`/meta.pt (atomically), naming `files` (in rank order, in
// `dir`), then removes the rank files of earlier saves.
void write_sharded_meta(const c10::IValue& value, const std::string& dir, const std::vector<std::string>& files,
                        const std::vector<ShardedPlace>& places);

}  // namespace lt
