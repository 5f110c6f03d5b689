#pragma once
// The zip archive torch.save's format is (internal to plugins/io: the public
// entry points are torch_plugin.h's). StoredZipWriter writes what LibTorch's
// PyTorchStreamWriter (miniz) writes, byte for byte, but streamed: each
// record from its own memory, its CRC-32 taken as it goes, so a checkpoint is
// never whole in memory and a record may arrive late (a placeholder's value).
// Layout it keeps:
//   - each record stored (not compressed), its data 64-byte aligned by an
//     "FB" extra field, its CRC-32 and sizes in a data descriptor after the data;
//   - then the central directory and the zip64 end records miniz always adds;
//   - a record of 4 GiB or more, or one that starts past 4 GiB, carries
//     miniz's zip64 extra field (local header: its size and a compressed size
//     of 0 / its offset; central directory: its sizes / its offset) and a
//     64-bit data descriptor.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace lt::detail {

// Where an archive's bytes go, in order (a file, a buffer).
using ByteSink = std::function<void(const void*, size_t)>;

class StoredZipWriter {
 public:
  // Records are named `archive`/name (torch.save's "archive/data.pkl").
  StoredZipWriter(std::string archive, ByteSink sink);

  // Whether records of these sizes make an archive this writer writes as
  // miniz does: fewer than 65535 records, none empty (miniz writes an empty
  // record otherwise).
  static bool writes(const std::vector<std::pair<std::string, size_t>>& records);

  // Writes one record: its header, its bytes (read from `data`, never
  // copied), its data descriptor.
  void record(const std::string& name, const char* data, size_t size);
  // The central directory and end records; nothing may follow.
  void finish();

 private:
  struct Written {
    std::string name;
    uint32_t crc;
    uint64_t size, offset;
  };
  void emit(const void* data, size_t size);

  std::string prefix_;
  ByteSink sink_;
  uint64_t cursor_ = 0;
  std::vector<Written> written_;
};

// LibTorch's own writer, for what StoredZipWriter does not write (empty
// records, 65535 records or more): torch::jit::writeArchiveAndTensors'
// archive of `pickle` and `tensors`. A failure of `sink` is rethrown once
// the writer (C code) has returned.
void write_with_libtorch(const ByteSink& sink, const std::vector<char>& pickle, const std::vector<at::Tensor>& tensors);

}  // namespace lt::detail
