#include <lightning_cpp/core/checkpoint_io.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <variant>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/state_dict.h>

namespace lt {

namespace {

// The zip records' signatures.
constexpr uint32_t kLocalHeader = 0x04034b50, kDataDescriptor = 0x08074b50, kDirectoryEntry = 0x02014b50,
                   kDirectoryEnd = 0x06054b50, kZip64End = 0x06064b50, kZip64Locator = 0x07064b50;

void put16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}
void put32(std::string& out, uint32_t v) {
  put16(out, static_cast<uint16_t>(v & 0xffff));
  put16(out, static_cast<uint16_t>(v >> 16));
}
void put64(std::string& out, uint64_t v) {
  put32(out, static_cast<uint32_t>(v));
  put32(out, static_cast<uint32_t>(v >> 32));
}

// The zip LibTorch's PyTorchStreamWriter (miniz) writes, byte for byte:
// each record stored, its data 64-byte aligned by an "FB" extra field, its
// CRC-32 and sizes in a data descriptor after the data; then the central
// directory and the zip64 end records miniz always adds. A record of 4 GiB
// or more, or one that starts past 4 GiB, carries miniz's zip64 extra field
// (local header: its size and a compressed size of 0 / its offset; central
// directory: its sizes / its offset) and a 64-bit data descriptor. The CRC
// is zlib's (5.9 GB/s on the machine of docs/benchmarks.md), taken on a
// second thread while a large record is written, else piece by piece just
// before each piece is written.
class StoredZipWriter {
 public:
  using Sink = std::function<void(const void*, size_t)>;
  StoredZipWriter(std::string archive, Sink sink) : prefix_(std::move(archive) + "/"), sink_(std::move(sink)) {}

  // Whether records of these sizes make an archive this writer writes as
  // miniz does: fewer than 65535 records, none empty (miniz writes an empty
  // record otherwise).
  static bool writes(const std::vector<std::pair<std::string, size_t>>& records) {
    return records.size() < 0xffff && std::none_of(records.begin(), records.end(), [](const auto& r) {
             return r.second == 0;
           });
  }

  void record(const std::string& name, const char* data, size_t size) {
    const std::string full = prefix_ + name;
    const uint64_t offset = cursor_;
    const std::string zip64 = zip64_field(size >= kMax32, size, 0, offset >= kMax32, offset);
    std::string header;
    put32(header, kLocalHeader);
    put16(header, 0);       // version needed
    put16(header, kFlags);  // data descriptor follows; UTF-8 name
    for (int i = 0; i < 3; ++i) put16(header, 0);  // stored; time; date
    for (int i = 0; i < 3; ++i) put32(header, 0);  // CRC and sizes: in the descriptor
    put16(header, static_cast<uint16_t>(full.size()));
    const size_t padding = header_size(cursor_, full.size(), zip64.size()) - kLocalHeaderSize - full.size() -
                           zip64.size() - 4;
    put16(header, static_cast<uint16_t>(zip64.size() + padding + 4));
    header += full;
    header += zip64;
    header += "FB";
    put16(header, static_cast<uint16_t>(padding));
    header.append(padding, 'Z');
    emit(header.data(), header.size());
    // A large record's CRC on a second thread, while this one writes it.
    std::future<uLong> crc_of_all;
    if (size >= kOverlapFrom) crc_of_all = std::async(std::launch::async, [=] { return crc_of(data, size); });
    uLong crc = crc32(0, nullptr, 0);
    for (size_t done = 0; done < size;) {
      const size_t piece = std::min<size_t>(size - done, size_t{1} << 20);
      if (!crc_of_all.valid()) crc = crc_of(data + done, piece, crc);
      emit(data + done, piece);
      done += piece;
    }
    if (crc_of_all.valid()) crc = crc_of_all.get();
    std::string descriptor;
    put32(descriptor, kDataDescriptor);
    put32(descriptor, static_cast<uint32_t>(crc));
    for (int i = 0; i < 2; ++i) zip64.empty() ? put32(descriptor, static_cast<uint32_t>(size)) : put64(descriptor, size);
    emit(descriptor.data(), descriptor.size());
    written_.push_back({full, static_cast<uint32_t>(crc), size, offset});
  }

  void finish() {
    const uint64_t directory_offset = cursor_;
    std::string tail;
    for (const Written& w : written_) {
      const std::string zip64 = zip64_field(w.size >= kMax32, w.size, w.size, w.offset >= kMax32, w.offset);
      put32(tail, kDirectoryEntry);
      put16(tail, 0);  // version made by
      put16(tail, 0);  // version needed
      put16(tail, kFlags);
      for (int i = 0; i < 3; ++i) put16(tail, 0);  // stored; time; date
      put32(tail, w.crc);
      put32(tail, clamp32(w.size));
      put32(tail, clamp32(w.size));
      put16(tail, static_cast<uint16_t>(w.name.size()));
      put16(tail, static_cast<uint16_t>(zip64.size()));
      for (int i = 0; i < 3; ++i) put16(tail, 0);  // comment, disk, internal attributes
      put32(tail, 0);                              // external attributes
      put32(tail, clamp32(w.offset));
      tail += w.name;
      tail += zip64;
    }
    const uint64_t directory_size = tail.size(), end_offset = directory_offset + directory_size;
    put32(tail, kZip64End);
    put64(tail, 44);
    put16(tail, 0x031e);  // made by: Unix, 3.0
    put16(tail, 45);      // needed: zip64
    put32(tail, 0);
    put32(tail, 0);
    put64(tail, written_.size());
    put64(tail, written_.size());
    put64(tail, directory_size);
    put64(tail, directory_offset);
    put32(tail, kZip64Locator);
    put32(tail, 0);
    put64(tail, end_offset);
    put32(tail, 1);
    put32(tail, kDirectoryEnd);
    put16(tail, 0);
    put16(tail, 0);
    put16(tail, static_cast<uint16_t>(written_.size()));
    put16(tail, static_cast<uint16_t>(written_.size()));
    put32(tail, clamp32(directory_size));
    put32(tail, clamp32(directory_offset));
    put16(tail, 0);
    emit(tail.data(), tail.size());
  }

 private:
  static constexpr uint16_t kFlags = 0x0808;
  static constexpr uint64_t kLocalHeaderSize = 30, kMax32 = 0xffffffffULL;

  static constexpr size_t kOverlapFrom = size_t{8} << 20;

  static uint32_t clamp32(uint64_t v) { return static_cast<uint32_t>(std::min(v, kMax32)); }

  // miniz's zip64 extended information (tag 1): the sizes, then the offset, each where it needs 64 bits.
  static std::string zip64_field(bool sizes, uint64_t size, uint64_t compressed, bool at, uint64_t offset) {
    std::string field;
    if (!sizes && !at) return field;
    put16(field, 1);
    put16(field, static_cast<uint16_t>((sizes ? 16 : 0) + (at ? 8 : 0)));
    if (sizes) {
      put64(field, size);
      put64(field, compressed);
    }
    if (at) put64(field, offset);
    return field;
  }

  static uLong crc_of(const char* data, size_t size, uLong crc = crc32(0, nullptr, 0)) {
    for (size_t done = 0; done < size;) {
      const auto piece = static_cast<uInt>(std::min<size_t>(size - done, size_t{1} << 30));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(data + done), piece);
      done += piece;
    }
    return crc;
  }

  // A local header with its name, zip64 field and "FB" extra field, ending
  // where the data is 64-byte aligned (caffe2::serialize::detail::getPadding;
  // 64 is 1.13's kFieldAlignment and 2.x's default alignment alike).
  static uint64_t header_size(uint64_t cursor, size_t name_size, size_t zip64_size) {
    constexpr uint64_t kAlignment = 64;
    const uint64_t start = cursor + kLocalHeaderSize + name_size + zip64_size + 4;
    return start - cursor + (kAlignment - start % kAlignment) % kAlignment;
  }

  void emit(const void* data, size_t size) {
    sink_(data, size);
    cursor_ += size;
  }

  struct Written {
    std::string name;
    uint32_t crc;
    uint64_t size, offset;
  };
  std::string prefix_;
  Sink sink_;
  uint64_t cursor_ = 0;
  std::vector<Written> written_;
};

// LibTorch's writer, for what StoredZipWriter does not write (empty records,
// 65535 records or more): its CRC-32 is computed inside.
void write_with_libtorch(const std::function<void(const void*, size_t)>& sink, const std::vector<char>& pickle,
                         const std::vector<at::Tensor>& tensors) {
  std::exception_ptr failure;  // rethrown once the zip writer (C code) has returned
  auto writer = std::make_unique<caffe2::serialize::PyTorchStreamWriter>([&](const void* data, size_t size) -> size_t {
    if (failure) return size;  // after a failure: nothing more is written, and nothing more fails
    try {
      sink(data, size);
    } catch (...) {
      failure = std::current_exception();
      return 0;
    }
    return size;
  });
  try {
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), tensors, *writer);
    writer->writeEndOfFile();
  } catch (...) {
    if (!failure) failure = std::current_exception();
    try {
      if (!writer->finalized()) writer->writeEndOfFile();
    } catch (...) {
    }
    // A writer that could not finish would try again in its destructor, and
    // throw there: it is left (a few bytes, on a failed save only).
    if (!writer->finalized()) (void)writer.release();
  }
  writer.reset();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

namespace {

constexpr const char* kMetaFile = "meta.pt";
constexpr const char* kShardedRecord = "sharded.pkl";

// `value` with each list of ints, floats, bools or tensors made a generic
// list (the pickler writes those as plain pickle lists; the typed ones as a
// torch.jit._pickle.build_*list call); tensors are shared, not copied, and
// a container without lists in it is `value` itself (the pickle is then
// byte for byte what LibTorch's writer makes of it, untagged).
c10::IValue plain_lists(const c10::IValue& value) {
  if (value.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    for (const c10::IValue& item : value.toListRef()) out.push_back(plain_lists(item));
    return out;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    bool changed = false;
    for (const auto& entry : dict) {
      c10::IValue item = plain_lists(entry.value());
      changed = changed || !item.isSameIdentity(entry.value());
      out.insert(entry.key(), std::move(item));
    }
    return changed ? c10::IValue(out) : value;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    bool changed = false;
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      items.push_back(plain_lists(item));
      changed = changed || !items.back().isSameIdentity(item);
    }
    return changed ? c10::ivalue::Tuple::create(std::move(items)) : value;
  }
  return value;
}

// write_pickle_archive's work. With `sharded` (a sharded checkpoint's
// meta.pt): the placeholders' records are left out, and a record
// kShardedRecord is added: {"files": [str], "places": {key: (part, offset, numel)}}.
struct ShardedLayout {
  const std::vector<std::string>& files;
  const std::vector<ShardedPlace>& places;
};
void write_archive(const c10::IValue& value, const std::function<void(const void*, size_t)>& sink,
                   const DeferredValues& deferred, const ShardedLayout* sharded) {
  // The pickle holds the structure and refers to each tensor's storage by
  // number; the storages follow as records written from the tensors' own
  // memory (a CUDA one copied to the CPU one at a time): the file is never
  // whole in memory. What torch::pickle_save writes, byte for byte
  // (torch::jit::writeArchiveAndTensors: the storages, the pickle, then the
  // writer's version record), a placeholder's record once `deferred` gives its value.
  // Untagged, with plain lists: what Python's torch.load reads with its
  // defaults (weights_only=True), which refuses the JIT pickler's
  // restore_type_tag and build_intlist-style globals. LibTorch reads it too.
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(plain_lists(value));
  pickler.stop();
  const std::vector<at::Tensor>& tensors = pickler.tensorData();
  const std::string version = std::to_string(caffe2::serialize::kMinProducedFileFormatVersion) + "\n";
  std::vector<std::pair<std::string, size_t>> records;
  std::unordered_map<const c10::StorageImpl*, size_t> placeholders;  // storage -> record
  for (size_t i = 0; i < tensors.size(); ++i) {
    records.emplace_back("data/" + std::to_string(i), tensors[i].storage().nbytes());
    if (is_deferred(tensors[i])) placeholders.emplace(tensors[i].storage().unsafeGetStorageImpl(), i);
  }
  records.emplace_back("data.pkl", pickle.size());
  records.emplace_back("version", version.size());
  LT_INTERNAL_ASSERT(placeholders.empty() || deferred || sharded, "write_pickle_archive: ", placeholders.size(),
                     " placeholder tensors and nothing to give their values");
  std::vector<char> layout;
  if (sharded != nullptr) {
    c10::impl::GenericDict places(c10::StringType::get(), c10::AnyType::get());
    for (const ShardedPlace& place : sharded->places) {
      auto it = placeholders.find(place.placeholder.storage().unsafeGetStorageImpl());
      LT_INTERNAL_ASSERT(it != placeholders.end(), "write_sharded_meta: a place for no placeholder of the checkpoint");
      places.insert(std::to_string(it->second), c10::ivalue::Tuple::create(place.part, place.offset,
                                                                            place.placeholder.numel()));
    }
    LT_INTERNAL_ASSERT(places.size() == placeholders.size(), "write_sharded_meta: ", placeholders.size(),
                       " placeholders and ", places.size(), " places");
    c10::impl::GenericDict table(c10::StringType::get(), c10::AnyType::get());
    table.insert("files", c10::List<std::string>(sharded->files));
    table.insert("places", places);
    layout = torch::jit::pickle(table);
    records.emplace_back(kShardedRecord, layout.size());
  }
  if (!StoredZipWriter::writes(records)) {
    LT_INTERNAL_ASSERT(placeholders.empty(), "write_pickle_archive: placeholders in an archive of ", records.size(),
                       " records or with an empty one");
    write_with_libtorch(sink, pickle, tensors);
    return;
  }
  StoredZipWriter zip("archive", sink);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (is_deferred(tensors[i])) continue;
    const torch::jit::WriteableTensorData storage = torch::jit::getWriteableTensorData(tensors[i]);
    zip.record(records[i].first, storage.data(), storage.sizeInBytes());
  }
  if (deferred) {
    std::exception_ptr failure;  // rethrown once `deferred` finished its collectives
    std::vector<bool> written(tensors.size(), false);
    deferred([&](const torch::Tensor& placeholder, const torch::Tensor& value) {
      if (failure) return;
      try {
        auto it = placeholders.find(placeholder.storage().unsafeGetStorageImpl());
        LT_INTERNAL_ASSERT(it != placeholders.end() && !written[it->second],
                           "write_pickle_archive: a value for no placeholder of the archive, or given twice");
        const size_t i = it->second;
        const torch::Tensor bytes = value.to(torch::kCPU).contiguous();
        LT_INTERNAL_ASSERT(bytes.nbytes() == records[i].second && bytes.dtype() == placeholder.dtype(),
                           "write_pickle_archive: a value of ", bytes.nbytes(), " bytes of ", bytes.dtype(),
                           " for a placeholder of ", records[i].second, " bytes of ", placeholder.dtype());
        zip.record(records[i].first, static_cast<const char*>(bytes.data_ptr()), bytes.nbytes());
        written[i] = true;
      } catch (...) {
        failure = std::current_exception();
      }
    });
    if (failure) std::rethrow_exception(failure);
    for (const auto& [storage, i] : placeholders) {
      LT_INTERNAL_ASSERT(written[i], "write_pickle_archive: no value was given for placeholder record ", i);
    }
  }
  zip.record("data.pkl", pickle.data(), pickle.size());
  zip.record("version", version.data(), version.size());
  if (!layout.empty()) zip.record(kShardedRecord, layout.data(), layout.size());
  zip.finish();
}

}  // namespace

void write_pickle_archive(const c10::IValue& value, const std::function<void(const void*, size_t)>& sink,
                          const DeferredValues& deferred) {
  write_archive(value, sink, deferred, nullptr);
}

void atomic_pickle_save(const c10::IValue& value, const std::string& path, const DeferredValues& deferred) {
  FileReplacement file(path);
  write_pickle_archive(value, [&](const void* data, size_t size) { file.write(data, size); }, deferred);
  file.commit();
}

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(
                                                        std::filesystem::path(path) / kMetaFile, ec);
}

std::string shard_file_name(int64_t rank, int64_t world_size, uint64_t token) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(token));
  return c10::str("shard_", rank, "_of_", world_size, "-", hex, ".pt");
}

void write_sharded_meta(const c10::IValue& value, const std::string& dir, const std::vector<std::string>& files,
                        const std::vector<ShardedPlace>& places) {
  namespace fs = std::filesystem;
  const ShardedLayout layout{files, places};
  FileReplacement file((fs::path(dir) / kMetaFile).string());
  write_archive(value, [&](const void* data, size_t size) { file.write(data, size); }, {}, &layout);
  file.commit();
  // The rank files of earlier saves (no meta.pt names them now).
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard_", 0) == 0 && entry.path().extension() == ".pt" &&
        std::find(files.begin(), files.end(), name) == files.end()) {
      fs::remove(entry.path(), ec);
    }
  }
}

namespace {

uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t le32(const unsigned char* p) { return static_cast<uint32_t>(le16(p)) | static_cast<uint32_t>(le16(p + 2)) << 16; }
uint64_t le64(const unsigned char* p) { return static_cast<uint64_t>(le32(p)) | static_cast<uint64_t>(le32(p + 4)) << 32; }


// A checkpoint file read in place: the zip archive torch.save and
// lightning-cpp write (records stored, not compressed), its directory
// checked when opened and each record's CRC-32 checked as its bytes are read
// (LibTorch 1.13's reader checks neither: a flipped byte loaded silently).
// A problem is a ValueError naming the file and the record.
class CheckedCheckpoint : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit CheckedCheckpoint(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    LT_CHECK_VALUE(!std::filesystem::is_directory(path_, ec), "checkpoint '", path_,
                   "' is a folder with no meta.pt: neither a checkpoint file nor a sharded checkpoint");
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    LT_CHECK_VALUE(fd_ >= 0, "checkpoint '", path_, "' does not exist or cannot be read");
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw ValueError(c10::str("checkpoint '", path_, "' is not a regular file"));
    }
    size_ = static_cast<uint64_t>(st.st_size);
    unsigned char magic[4] = {0, 0, 0, 0};
    std::string problem = pread_all(0, magic, 4) && le32(magic) == kLocalHeader
                              ? read_directory()
                              : "not a zip archive, as torch.save and lightning-cpp write them";
    if (!problem.empty()) {
      ::close(fd_);
      corrupt(problem);
    }
    map_file();
  }
  ~CheckedCheckpoint() override { ::close(fd_); }

  size_t size() const override { return size_; }

  // The zip reader reads a stored record's bytes in one call at its data's
  // offset: their CRC-32 is checked there. A mismatch is a short read (the
  // reader is C code: nothing is thrown through it); problem() tells.
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= size_) return 0;
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - pos));
    if (!pread_all(pos, buf, n)) return 0;
    auto it = records_.find(pos);
    if (it != records_.end() && it->second.size == n && !check(it->second, buf)) return 0;
    return n;
  }

  // Checks the records not read yet, in pieces.
  void check_the_rest() const {
    std::vector<unsigned char> chunk(4 << 20);
    for (auto& [data, record] : records_) {
      if (record.checked) continue;
      uLong c = crc32(0, nullptr, 0);
      for (uint64_t done = 0; done < record.size;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), record.size - done));
        if (!pread_all(data + done, chunk.data(), n)) corrupt(c10::str("record '", record.name, "' cannot be read"));
        c = crc(chunk.data(), n, c);
        done += n;
      }
      if (const std::string problem = crc_problem(record, static_cast<uint32_t>(c)); !problem.empty()) corrupt(problem);
      record.checked = true;
    }
  }

  // Record `name` of the archive (its first directory: "archive/data/0"'s
  // "archive") as a view of the file mapped in memory, its CRC-32 checked;
  // an undefined DataPtr where it cannot be (a record not stored, or not
  // 64-byte aligned as torch.save and lightning-cpp write them; no mapping):
  // the caller reads it then. A CRC mismatch sets problem() and throws.
  at::DataPtr mapped_record(const std::string& name) const {
    auto found = by_name_.find(archive_prefix_ + name);
    if (!mapping_ || found == by_name_.end()) return at::DataPtr(nullptr, at::Device(at::kCPU));
    const Record& record = records_.at(found->second);
    if (!record.stored || found->second % 64 != 0 || record.size == 0) return at::DataPtr(nullptr, at::Device(at::kCPU));
    char* data = mapping_->bytes + found->second;
    if (!check(record, data)) throw std::runtime_error(problem_);
    return at::DataPtr(data, new std::shared_ptr<Mapping>(mapping_),
                       [](void* keep) { delete static_cast<std::shared_ptr<Mapping>*>(keep); }, at::Device(at::kCPU));
  }

  const std::string& problem() const { return problem_; }
  [[noreturn]] void corrupt(const std::string& problem) const {
    throw ValueError(c10::str("checkpoint '", path_, "' is truncated or corrupt (", size_, " bytes): ", problem));
  }

 private:
  struct Record {
    std::string name;
    uint64_t size;
    uint32_t crc;
    bool stored;
    mutable bool checked;
  };

  // A whole record's bytes against its CRC-32, once: false, with problem()
  // set, where they fail it.
  bool check(const Record& record, const void* data) const {
    if (record.checked) return true;
    if (std::string problem = crc_problem(record, crc(data, record.size)); !problem.empty()) {
      problem_ = std::move(problem);
      return false;
    }
    record.checked = true;
    return true;
  }

  bool pread_all(uint64_t pos, void* buf, size_t n) const {
    for (size_t done = 0; done < n;) {
      const ssize_t got = ::pread(fd_, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(pos + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      done += static_cast<size_t>(got);
    }
    return true;
  }
  static uint32_t crc(const void* data, size_t n, uLong c = crc32(0, nullptr, 0)) {
    for (size_t done = 0; done < n;) {  // zlib's length is 32 bits
      const auto piece = static_cast<uInt>(std::min<size_t>(n - done, 1u << 30));
      c = crc32(c, static_cast<const Bytef*>(data) + done, piece);
      done += piece;
    }
    return static_cast<uint32_t>(c);
  }
  static std::string crc_problem(const Record& record, uint32_t computed) {
    if (!record.stored || computed == record.crc) return "";
    char hex[64];
    std::snprintf(hex, sizeof hex, "stored %08x, computed %08x", record.crc, computed);
    return c10::str("record '", record.name, "' fails its CRC-32 check (", hex, ")");
  }

  // What is wrong with the zip directory, or "" (records_ then holds every record).
  std::string read_directory() {
    constexpr uint64_t kEndSize = 22, kMaxComment = 65535;
    if (size_ < kEndSize) return "too short for a zip archive";
    const uint64_t tail_start = size_ > kEndSize + kMaxComment + 20 ? size_ - kEndSize - kMaxComment - 20 : 0;
    std::vector<unsigned char> tail(static_cast<size_t>(size_ - tail_start));
    if (!pread_all(tail_start, tail.data(), tail.size())) return "its end cannot be read";
    size_t end = tail.size() - kEndSize;
    while (le32(&tail[end]) != kDirectoryEnd) {
      if (end == 0) return "no zip directory at its end";
      --end;
    }
    uint64_t entries = le16(&tail[end + 10]);
    uint64_t directory_size = le32(&tail[end + 12]);
    uint64_t directory = le32(&tail[end + 16]);
    uint64_t directory_end = tail_start + end;
    if (entries == 0xFFFF || directory == 0xFFFFFFFF || directory_size == 0xFFFFFFFF) {  // zip64 (over 4 GiB)
      if (end < 20 || le32(&tail[end - 20]) != kZip64Locator) return "its zip64 directory locator is missing";
      const uint64_t record = le64(&tail[end - 20 + 8]);
      unsigned char z[56];
      if (record + 56 > size_ || !pread_all(record, z, 56) || le32(z) != kZip64End) {
        return "its zip64 directory end is damaged";
      }
      entries = le64(z + 32);
      directory_size = le64(z + 40);
      directory = le64(z + 48);
      directory_end = record;
    }
    if (directory + directory_size > directory_end) return "its zip directory points past the file's end";
    std::vector<unsigned char> dir(static_cast<size_t>(directory_size));
    if (!pread_all(directory, dir.data(), dir.size())) return "its zip directory cannot be read";
    size_t at = 0;
    for (uint64_t e = 0; e < entries; ++e) {
      if (at + 46 > dir.size() || le32(&dir[at]) != kDirectoryEntry) return "its zip directory is damaged";
      const uint16_t method = le16(&dir[at + 10]);
      const uint32_t crc = le32(&dir[at + 16]);
      uint64_t compressed = le32(&dir[at + 20]), uncompressed = le32(&dir[at + 24]);
      const size_t name_size = le16(&dir[at + 28]), extra_size = le16(&dir[at + 30]);
      uint64_t local = le32(&dir[at + 42]);
      const size_t rest = name_size + extra_size + le16(&dir[at + 32]);
      if (at + 46 + rest > dir.size()) return "its zip directory is damaged";
      const std::string name(reinterpret_cast<const char*>(&dir[at + 46]), name_size);
      // Zip64: the sizes and offset that do not fit 32 bits, in this order, in extra field 1.
      for (size_t x = at + 46 + name_size; x + 4 <= at + 46 + name_size + extra_size;) {
        const uint16_t id = le16(&dir[x]), length = le16(&dir[x + 2]);
        if (id == 1) {
          size_t f = x + 4;
          for (uint64_t* field : {&uncompressed, &compressed, &local}) {
            if (*field != 0xFFFFFFFF) continue;
            if (f + 8 > x + 4 + length) return c10::str("record '", name, "' has a damaged zip64 field");
            *field = le64(&dir[f]);
            f += 8;
          }
        }
        x += 4 + length;
      }
      unsigned char header[30];
      if (local + 30 > size_ || !pread_all(local, header, 30) || le32(header) != kLocalHeader) {
        return c10::str("record '", name, "' has no header where the directory says");
      }
      const uint64_t data = local + 30 + le16(header + 26) + le16(header + 28);
      if (data + compressed > size_) return c10::str("record '", name, "' runs past the file's end");
      records_.emplace(data, Record{name, compressed, crc, method == 0 && compressed == uncompressed, false});
      at += 46 + rest;
    }
    return "";
  }

  // The file mapped private and writable (copy on write: a loaded tensor
  // changed in place changes a copy of its page, never the file). Its pages
  // are read as they are touched, shared by every process loading the file,
  // and dropped by the kernel under memory pressure, where a copy would be
  // the process's own memory. A file is replaced by renaming, never cut in
  // place, so the mapping stays whole.
  struct Mapping {
    char* bytes = nullptr;
    size_t size = 0;
    ~Mapping() {
      if (bytes != nullptr) ::munmap(bytes, size);
    }
  };
  void map_file() {
    if (size_ == 0) return;
    void* bytes = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0);
    if (bytes == MAP_FAILED) return;  // read by copies then
    mapping_ = std::make_shared<Mapping>();
    mapping_->bytes = static_cast<char*>(bytes);
    mapping_->size = size_;
    for (const auto& [data, record] : records_) by_name_.emplace(record.name, data);
    // The archive's folder, as LibTorch's reader takes it: its first record's ("archive/data/0": "archive/").
    if (!records_.empty()) archive_prefix_ = records_.begin()->second.name.substr(0, records_.begin()->second.name.find('/') + 1);
  }

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::map<uint64_t, Record> records_;  // by the offset of their data
  std::unordered_map<std::string, uint64_t> by_name_;  // with a mapping: each record's data offset
  std::string archive_prefix_;
  std::shared_ptr<Mapping> mapping_;
  mutable std::string problem_;
};

}  // namespace

namespace {

// A record the archive itself does not hold (a sharded checkpoint's placeholders'), by key ("0" of "data/0").
using RecordElsewhere = std::function<at::DataPtr(const std::string& key)>;

c10::IValue load_archive(const std::shared_ptr<CheckedCheckpoint>& file, const RecordElsewhere& elsewhere = {}) {
  try {
    // What torch::jit::readArchiveAndTensors does, each tensor's bytes a
    // view of the mapped file (mapped_record; a copy where it cannot be):
    // loading takes no memory of the process's own for the tensors.
    caffe2::serialize::PyTorchStreamReader reader(file);
    c10::IValue value;
    try {
      const auto [pickle, pickle_size] = reader.getRecord("data.pkl");
      size_t pickle_read = 0;
      auto read_pickle = [&, data = static_cast<const char*>(pickle.get()), size = pickle_size](char* buffer,
                                                                                               size_t n) -> size_t {
        n = std::min(n, size - pickle_read);
        std::memcpy(buffer, data + pickle_read, n);
        pickle_read += n;
        return n;
      };
      auto read_record = [&](const std::string& key) -> at::DataPtr {
        at::DataPtr mapped = file->mapped_record("data/" + key);
        if (mapped) return mapped;
        if (elsewhere && !reader.hasRecord("data/" + key)) return elsewhere(key);
        return std::get<0>(reader.getRecord("data/" + key));
      };
      torch::jit::Unpickler unpickler(read_pickle, nullptr, nullptr, read_record, c10::nullopt);
      unpickler.set_version(reader.version());
      value = unpickler.parse_ivalue();
    } catch (const std::exception& e) {
      if (!file->problem().empty()) file->corrupt(file->problem());  // a record failed its CRC-32
      // LibTorch 1.13's unpickler cannot read collections.OrderedDict (what
      // torch.save(model.state_dict()) writes); the marker is a hint, not
      // proof: every tensor torch.save writes names it too.
      static const std::string kOrderedDict = "collections\nOrderedDict\n";
      bool ordered_dict = false;
      if (reader.hasRecord("data.pkl")) {
        auto [data, size] = reader.getRecord("data.pkl");
        const char* begin = static_cast<const char*>(data.get());
        ordered_dict = std::search(begin, begin + size, kOrderedDict.begin(), kOrderedDict.end()) != begin + size;
      }
      const std::string what = error_message(e);
      // Pickle's APPEND (97): how Python writes a list of one element.
      const bool append = what.find("Unknown opcode for unpickling") != std::string::npos &&
                          what.find(": 97") != std::string::npos;
      file->corrupt(c10::str(
          what.substr(0, 200),
          append ? "; if Python wrote it: it holds a list of one element, which LibTorch 1.13's unpickler cannot "
                   "read; save such a list as a tuple (an optimizer's state_dict with one parameter group: "
                   "{\"state\": sd[\"state\"], \"param_groups\": tuple(sd[\"param_groups\"])})"
          : ordered_dict ? "; if Python's torch.save(model.state_dict()) wrote it: it holds a collections.OrderedDict, "
                           "which LibTorch 1.13 cannot read; save a plain dict instead: "
                           "torch.save(dict(model.state_dict()), path)"
                         : ""));
    }
    file->check_the_rest();  // records the pickle does not refer to
    return value;
  } catch (const ValueError&) {
    throw;
  } catch (const std::exception& e) {
    if (!file->problem().empty()) file->corrupt(file->problem());
    file->corrupt(error_message(e).substr(0, 200));
  }
}

// A sharded checkpoint's table (write_archive's kShardedRecord): the rank
// files, and each placeholder record's (part, offset, numel).
struct ShardedTable {
  std::vector<std::string> files;
  std::unordered_map<std::string, std::array<int64_t, 3>> places;
};
ShardedTable sharded_table(const std::shared_ptr<CheckedCheckpoint>& meta) {
  ShardedTable table;
  caffe2::serialize::PyTorchStreamReader reader(meta);
  if (!reader.hasRecord(kShardedRecord)) return table;  // no placeholders (a NO_SHARD run's)
  const auto [data, size] = reader.getRecord(kShardedRecord);
  if (!meta->problem().empty()) meta->corrupt(meta->problem());
  try {
    const c10::IValue value = torch::jit::unpickle(static_cast<const char*>(data.get()), size);
    const auto dict = value.toGenericDict();
    for (const auto& file : dict.at("files").toListRef()) table.files.push_back(file.toStringRef());
    for (const auto& place : dict.at("places").toGenericDict()) {
      const auto& t = place.value().toTupleRef().elements();
      table.places[place.key().toStringRef()] = {t.at(0).toInt(), t.at(1).toInt(), t.at(2).toInt()};
    }
  } catch (const std::exception& e) {
    meta->corrupt(c10::str("its record '", kShardedRecord, "' is damaged: ", error_message(e).substr(0, 200)));
  }
  return table;
}

// Rank file `name` of the sharded checkpoint `dir`, which must exist.
std::string rank_file(const std::string& dir, const std::string& name) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  LT_CHECK_VALUE(std::filesystem::exists(path), "sharded checkpoint '", dir, "': its meta.pt names the file '", name,
                 "', which is missing (a folder copied in part, or a rank file removed)");
  return path;
}

// A sharded checkpoint's rank files, each read (mapped, its records
// CRC-checked) when a value first needs it.
class RankFiles {
 public:
  RankFiles(std::string dir, std::vector<std::string> files) : dir_(std::move(dir)), files_(std::move(files)) {
    parts_.resize(files_.size());
  }

  // Elements [offset, offset + numel) of the parts `part` of the files end
  // to end, as a view of one file where they lie in one part, else undefined.
  torch::Tensor view(int64_t part, int64_t offset, int64_t numel) {
    int64_t start = 0;
    for (size_t r = 0; r < files_.size(); ++r) {
      const torch::Tensor& t = part_of(r, part);
      if (offset >= start && offset + numel <= start + t.numel()) return t.narrow(0, offset - start, numel);
      if (start + t.numel() > offset) return {};
      start += t.numel();
    }
    return {};
  }

  // The dtype of the parts `part`.
  torch::TensorOptions options(int64_t part) { return part_of(0, part).options(); }

  // The same elements copied into `out` (contiguous, of the parts' dtype).
  void read(int64_t part, int64_t offset, const torch::Tensor& out) {
    const int64_t numel = out.numel();
    int64_t start = 0;
    for (size_t r = 0; r < files_.size() && start < offset + numel; ++r) {
      const torch::Tensor& t = part_of(r, part);
      LT_CHECK_VALUE(t.dtype() == out.dtype(), "sharded checkpoint '", dir_, "': part ", part, " of '", files_[r],
                     "' is ", t.dtype(), " where meta.pt has ", out.dtype());
      const int64_t from = std::max(offset, start), to = std::min(offset + numel, start + t.numel());
      if (from < to) out.narrow(0, from - offset, to - from).copy_(t.narrow(0, from - start, to - from));
      start += t.numel();
    }
    LT_CHECK_VALUE(start >= offset + numel, "sharded checkpoint '", dir_, "': the rank files' part ", part, " holds ",
                   start, " elements, and meta.pt places a value at elements [", offset, ", ", offset + numel, ")");
  }

 private:
  const torch::Tensor& part_of(size_t r, int64_t part) {
    if (parts_[r].empty()) {
      const c10::IValue loaded = pickle_load_file(rank_file(dir_, files_[r]));
      LT_CHECK_VALUE(loaded.isTuple(), "sharded checkpoint '", dir_, "': '", files_[r], "' holds no tuple of parts");
      for (const auto& t : loaded.toTupleRef().elements()) parts_[r].push_back(t.toTensor().contiguous().view(-1));
    }
    LT_CHECK_VALUE(part >= 0 && static_cast<size_t>(part) < parts_[r].size(), "sharded checkpoint '", dir_, "': '",
                   files_[r], "' has ", parts_[r].size(), " parts, and meta.pt places a value in part ", part);
    return parts_[r][static_cast<size_t>(part)];
  }

  std::string dir_;
  std::vector<std::string> files_;
  std::vector<std::vector<torch::Tensor>> parts_;
};

// Where the elements of a placeholder of a sharded checkpoint read with placeholders are.
class PlacedValue : public DeferredSource {
 public:
  PlacedValue(std::shared_ptr<RankFiles> files, int64_t part, int64_t offset)
      : files_(std::move(files)), part_(part), offset_(offset) {}
  void read(int64_t begin, const torch::Tensor& out) const override { files_->read(part_, offset_ + begin, out); }

 private:
  std::shared_ptr<RankFiles> files_;
  int64_t part_;
  int64_t offset_;
};
c10::IValue load_sharded(const std::string& dir, bool placeholders) {
  namespace fs = std::filesystem;
  auto meta = std::make_shared<CheckedCheckpoint>((fs::path(dir) / kMetaFile).string());
  const ShardedTable table = sharded_table(meta);
  auto files = std::make_shared<RankFiles>(dir, table.files);
  auto elsewhere = [&](const std::string& key) -> at::DataPtr {
    auto it = table.places.find(key);
    if (it == table.places.end()) meta->corrupt(c10::str("record 'data/", key, "' is neither in it nor placed in a rank file"));
    const auto [part, offset, numel] = it->second;
    if (placeholders) {
      return deferred_data(std::make_unique<PlacedValue>(files, part, offset), at::Device(at::kCPU));
    }
    torch::Tensor value = files->view(part, offset, numel);
    if (!value.defined()) {
      value = torch::empty({numel}, files->options(part));
      files->read(part, offset, value);
    }
    void* data = value.data_ptr();
    return at::DataPtr(data, new torch::Tensor(std::move(value)),
                       [](void* tensor) { delete static_cast<torch::Tensor*>(tensor); }, at::Device(at::kCPU));
  };
  return load_archive(meta, elsewhere);
}

}  // namespace

c10::IValue pickle_load_file(const std::string& path, bool placeholders) {
  if (is_sharded_checkpoint(path)) return load_sharded(path, placeholders);
  return load_archive(std::make_shared<CheckedCheckpoint>(path));
}

void check_checkpoint_file(const std::string& path) {
  if (!is_sharded_checkpoint(path)) return CheckedCheckpoint(path).check_the_rest();
  namespace fs = std::filesystem;
  auto meta = std::make_shared<CheckedCheckpoint>((fs::path(path) / kMetaFile).string());
  meta->check_the_rest();
  for (const std::string& file : sharded_table(meta).files) CheckedCheckpoint(rank_file(path, file)).check_the_rest();
}

void load_weights(torch::nn::Module& module, const std::string& path, bool strict) {
  load_module_state_dict(module, state_dict_from(pickle_load_file(path), path), strict);
}

}  // namespace lt
