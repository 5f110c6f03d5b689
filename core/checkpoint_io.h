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

// Tensors whose values reach the file while it is written. A sharding
// strategy's checkpoint holds a placeholder (deferred_tensor: the shape,
// dtype and device, no bytes) for each tensor a rank holds only a part of;
// the save writes everything else, then calls the DeferredValues once, which
// hands over each placeholder's value (gathered a unit at a time), so that no
// rank ever holds the whole model. Reading a placeholder's data is an error
// of the caller (it has none); `is_deferred` tells one.
torch::Tensor deferred_tensor(at::IntArrayRef sizes, const torch::TensorOptions& options);
bool is_deferred(const torch::Tensor& tensor);
// write(placeholder, value): value has the placeholder's shape and dtype. A
// DeferredValues is called on every rank (its gathers are collectives); only
// the writing rank's write() writes, the others' ignore what they are given.
using DeferredWrite = std::function<void(const torch::Tensor& placeholder, const torch::Tensor& value)>;
using DeferredValues = std::function<void(const DeferredWrite& write)>;

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
// The tensors of a list that pickle_load_file read. The archive holds plain
// pickle lists, as Python's torch.save writes them, so a list saved as a
// c10::List<torch::Tensor> reads back as a list of any type, which
// IValue::toTensorVector() refuses; this takes both.
std::vector<torch::Tensor> tensor_list(const c10::IValue& list);
// Copies elements [begin, begin + dst.numel()) of `value` (contiguous, its
// elements in order) into `dst`: read from its checkpoint's rank files where
// `value` is such a placeholder. materialized(value): all of them, as a tensor.
void copy_elements(const torch::Tensor& value, int64_t begin, const torch::Tensor& dst);
torch::Tensor materialized(const torch::Tensor& value);
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

// A checkpoint's "rng_states" (torch's CPU generator, which dropout and
// friends draw from: a resumed run continues its stream), and back.
StateDict rng_states();
void load_rng_states(const StateDict& states);

// Optimizer state as bytes (LibTorch's archive format) and back: what
// core/optimizer_state.h keeps for an optimizer PyTorch's layout does not name.
torch::Tensor optimizer_to_bytes(torch::optim::Optimizer& optimizer);
void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const torch::Tensor& bytes);

}  // namespace lt
