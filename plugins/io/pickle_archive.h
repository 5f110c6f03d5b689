#pragma once
// torch.save's format, both ways (internal to plugins/io: the public entry
// points are torch_plugin.h's): a zip archive of a pickle ("data.pkl") that
// holds the structure and refers to each tensor's storage by number, the
// storages as records "data/N", and a "version" record. Written streamed
// (zip_writer.h), read in place and CRC-checked (checked_reader.h).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/core/ivalue.h>

#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/plugins/io/checked_reader.h>
#include <lightning_cpp/plugins/io/zip_writer.h>

namespace lt::detail {

// The placeholders of an archive being written: each one's storage and the number N of its record "data/N".
using PlaceholderRecords = std::unordered_map<const c10::StorageImpl*, size_t>;
// A record added after the others (a sharded checkpoint's table, sharded_checkpoint.h), made once the
// placeholders' record numbers are known.
struct ExtraRecord {
  std::string name;
  std::vector<char> bytes;
};
using ExtraRecordOf = std::function<ExtraRecord(const PlaceholderRecords& placeholders)>;

// Writes `value` as torch.save's archive to `sink`. Placeholders
// (core/deferred_tensor.h) get their records from `deferred`, after the
// others'; with `extra` and no `deferred`, their records are left out and
// `extra`'s record is added (it must place them). Placeholders with neither
// are our bug (an internal error).
void write_archive(const c10::IValue& value, const ByteSink& sink, const DeferredValues& deferred,
                   const ExtraRecordOf& extra);

// A record "data/KEY" the archive itself does not hold (a sharded checkpoint's placeholders'), by KEY.
using RecordElsewhere = std::function<at::DataPtr(const std::string& key)>;

// Reads the archive `file` holds, each tensor a view of the mapped file
// where it can be; checks every record's CRC-32. A damaged archive is an
// lt::ValueError naming the file and the record, with a hint for the pickles
// LibTorch 1.13 cannot read.
c10::IValue load_archive(const std::shared_ptr<CheckedReader>& file, const RecordElsewhere& elsewhere = {});

}  // namespace lt::detail
