#pragma once
// A sharded checkpoint (fsdp's state_dict_type sharded) is a folder: a file
// per rank, written by the ranks at once (shard_R_of_W-TOKEN.pt: a tuple of
// the rank's parts, which torch.load reads), and meta.pt, global rank 0's,
// written last: the checkpoint with every tensor's record but the
// placeholders' (core/deferred_tensor.h), and a record "sharded.pkl" that
// names the rank files and places each placeholder's value: elements
// [offset, offset + numel) of part `part` of the rank files put end to end
// in rank order. Invariants:
//   - meta.pt is replaced atomically and names the files of its own save, so
//     a save killed midway leaves the previous checkpoint whole;
//   - rank files no meta.pt names are removed once the new meta.pt is in place;
//   - reading it (torch_plugin.h's pickle_load_file) gives what reading a
//     file gives (a value a view of a rank file where it lies in one part,
//     else copied together), so a checkpoint of any world size loads into
//     any world size and strategy.

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace lt {

// Where a placeholder's value lies in the rank files.
struct ShardedPlace {
  torch::Tensor placeholder;
  int64_t part;
  int64_t offset;
};
// Whether `path` is a folder with a meta.pt.
bool is_sharded_checkpoint(const std::string& path);
// Rank `rank`'s file of the save `token` (the same on every rank).
std::string shard_file_name(int64_t rank, int64_t world_size, uint64_t token);
// Writes `dir`/meta.pt (atomically), naming `files` (in rank order, in
// `dir`), then removes the rank files of earlier saves.
void write_sharded_meta(const c10::IValue& value, const std::string& dir, const std::vector<std::string>& files,
                        const std::vector<ShardedPlace>& places);

namespace detail {
// Reads the sharded checkpoint `dir`; with `placeholders`, the values its
// rank files hold stay placeholders copy_elements reads from them.
c10::IValue load_sharded(const std::string& dir, bool placeholders);
// Checks the CRC-32 of every record of meta.pt and of the rank files it names.
void check_sharded(const std::string& dir);
}  // namespace detail

}  // namespace lt
