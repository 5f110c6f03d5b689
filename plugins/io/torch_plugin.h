#pragma once
// TorchCheckpointIO (Lightning's plugins/io/torch_plugin.py): checkpoints in
// torch.save's format, which Python's torch.load reads, and the functions
// behind it that programs call directly. The default CheckpointIO of every
// strategy the Trainer and Fabric run (core/checkpoint_plugin.h).
//   - a save is atomic (core/files.h's FileReplacement: a failure names the
//     file and the OS error, and leaves `path` as it was) and streamed: each
//     tensor goes to the file from its own memory, never whole in memory;
//     the bytes are torch::pickle_save's (records over 4 GiB with miniz's
//     zip64 fields);
//   - a load reads each record straight into its tensor (a view of the
//     mapped file), and checks the zip directory and every record's CRC-32,
//     which LibTorch's reader does not: a damaged file is an lt::ValueError
//     naming the record;
//   - a sharded checkpoint's folder (sharded_checkpoint.h) loads as a file does.
// What a checkpoint holds is core/training_state.h's.

#include <cstddef>
#include <functional>
#include <string>

#include <torch/torch.h>

#include <lightning_cpp/core/checkpoint_plugin.h>
#include <lightning_cpp/core/deferred_tensor.h>

namespace lt {

class TorchCheckpointIO : public CheckpointIO {
 public:
  // atomic_pickle_save. (The defaults are CheckpointIO's, repeated for calls on a TorchCheckpointIO.)
  void save_checkpoint(const c10::IValue& checkpoint, const std::string& path,
                       const DeferredValues& deferred = {}) override;
  // pickle_load_file.
  c10::IValue load_checkpoint(const std::string& path, bool placeholders = false) override;
  // Removes the file, or a sharded checkpoint's folder; errors are ignored
  // (a checkpoint already gone, or one another process removes).
  void remove_checkpoint(const std::string& path) override;
};

// Writes `value` to `path` atomically and streamed (above). With `deferred`,
// the placeholders' records are written as it hands them over (after the
// others': the records' order differs from torch::pickle_save's, torch.load
// reads them by name); a failure to write is thrown once `deferred` has
// returned, so that it always finishes its collectives.
void atomic_pickle_save(const c10::IValue& value, const std::string& path, const DeferredValues& deferred = {});
// The same archive, to any sink (atomic_pickle_save's file).
void write_pickle_archive(const c10::IValue& value, const std::function<void(const void*, size_t)>& sink,
                          const DeferredValues& deferred = {});
// Reads what atomic_pickle_save (or torch.save) wrote, each record straight
// into its tensor. A file that is no zip archive, whose zip directory is
// damaged or one of whose records fails its CRC-32 check is a ValueError
// naming the record; check_checkpoint_file does the same checks alone.
// Either reads a sharded checkpoint's folder too. With `placeholders`, a
// sharded checkpoint's values that its rank files hold stay there: each is a
// placeholder (is_deferred) that copy_elements reads from them, so that a
// rank reads only the parts it needs.
c10::IValue pickle_load_file(const std::string& path, bool placeholders = false);
void check_checkpoint_file(const std::string& path);

// Loads a module's weights from `path`: a lightning-cpp checkpoint (its
// "state_dict") or a bare state_dict saved by Python's torch.save(model.state_dict()).
void load_weights(torch::nn::Module& module, const std::string& path, bool strict = true);

}  // namespace lt
