#pragma once
// CheckedReader: a checkpoint file read in place (internal to plugins/io: the
// public entry points are torch_plugin.h's). The zip archive torch.save and
// lightning-cpp write (records stored, not compressed); LibTorch's reader
// (1.13's) checks neither the directory nor the CRCs, so a flipped byte
// loaded silently. Invariants:
//   - the zip directory is checked when the file is opened: every record's
//     header is where the directory says and its data ends inside the file;
//   - a record's CRC-32 is checked once, the first time its bytes are read
//     (read(), mapped_record()) or by check_the_rest(); no byte reaches a
//     tensor unchecked;
//   - a problem is an lt::ValueError naming the file and the record
//     (corrupt()); inside LibTorch's zip reader (C code, nothing may be
//     thrown through it) a CRC mismatch is a short read, and problem() tells.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <caffe2/serialize/read_adapter_interface.h>
#include <c10/core/Allocator.h>

namespace lt::detail {

class CheckedReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  // Opens `path` and checks its zip directory: a ValueError where it is no
  // regular file, no zip archive, or its directory is damaged.
  explicit CheckedReader(std::string path);
  ~CheckedReader() override;
  CheckedReader(const CheckedReader&) = delete;
  CheckedReader& operator=(const CheckedReader&) = delete;

  size_t size() const override;
  // The zip reader reads a stored record's bytes in one call at its data's
  // offset: their CRC-32 is checked there. A mismatch is a short read.
  size_t read(uint64_t pos, void* buf, size_t n, const char* what = "") const override;

  // Checks the CRC-32 of the records not read yet (a ValueError at the first that fails).
  void check_the_rest() const;

  // Record `name` of the archive (under its first directory: "archive/data/0"
  // for "data/0") as a view of the file mapped in memory, its CRC-32
  // checked; an undefined DataPtr where it cannot be (a record not stored,
  // or not 64-byte aligned as torch.save and lightning-cpp write them; no
  // mapping): the caller reads it then. A CRC mismatch sets problem() and throws.
  at::DataPtr mapped_record(const std::string& name) const;

  // The CRC problem a short read() stands for, or "".
  const std::string& problem() const { return problem_; }
  // Throws the ValueError that names the file, its size and `problem`.
  [[noreturn]] void corrupt(const std::string& problem) const;

 private:
  struct Record {
    std::string name;
    uint64_t size;
    uint32_t crc;
    bool stored;
    mutable bool checked;
  };
  // The file mapped private and writable (copy on write: a loaded tensor
  // changed in place changes a copy of its page, never the file). Its pages
  // are read as they are touched, shared by every process loading the file,
  // and dropped by the kernel under memory pressure, where a copy would be
  // the process's own memory. A file is replaced by renaming, never cut in
  // place, so the mapping stays whole. Tensors that view it keep it.
  struct Mapping;

  bool check(const Record& record, const void* data) const;
  bool pread_all(uint64_t pos, void* buf, size_t n) const;
  std::string read_directory();
  void map_file();

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::map<uint64_t, Record> records_;                 // by the offset of their data
  std::unordered_map<std::string, uint64_t> by_name_;  // with a mapping: each record's data offset
  std::string archive_prefix_;
  std::shared_ptr<Mapping> mapping_;
  mutable std::string problem_;
};

}  // namespace lt::detail
