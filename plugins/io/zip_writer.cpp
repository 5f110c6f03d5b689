#include <lightning_cpp/plugins/io/zip_writer.h>

#include <zlib.h>

#include <algorithm>
#include <exception>
#include <future>
#include <memory>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>

#include <lightning_cpp/plugins/io/zip_format.h>

namespace lt::detail {

namespace {

constexpr uint16_t kFlags = 0x0808;  // a data descriptor follows; UTF-8 names
constexpr uint64_t kLocalHeaderSize = 30, kMax32 = 0xffffffffULL;
// From this size a record's CRC-32 is taken on a second thread while the record is written.
constexpr size_t kOverlapFrom = size_t{8} << 20;

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

uint32_t clamp32(uint64_t v) { return static_cast<uint32_t>(std::min(v, kMax32)); }

// miniz's zip64 extended information (tag 1): the sizes, then the offset, each where it needs 64 bits.
std::string zip64_field(bool sizes, uint64_t size, uint64_t compressed, bool at, uint64_t offset) {
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

// zlib's CRC-32 (its length argument is 32 bits: taken in pieces).
uLong crc_of(const char* data, size_t size, uLong crc = crc32(0, nullptr, 0)) {
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
uint64_t header_size(uint64_t cursor, size_t name_size, size_t zip64_size) {
  constexpr uint64_t kAlignment = 64;
  const uint64_t start = cursor + kLocalHeaderSize + name_size + zip64_size + 4;
  return start - cursor + (kAlignment - start % kAlignment) % kAlignment;
}

}  // namespace

StoredZipWriter::StoredZipWriter(std::string archive, ByteSink sink)
    : prefix_(std::move(archive) + "/"), sink_(std::move(sink)) {}

bool StoredZipWriter::writes(const std::vector<std::pair<std::string, size_t>>& records) {
  return records.size() < 0xffff &&
         std::none_of(records.begin(), records.end(), [](const auto& r) { return r.second == 0; });
}

void StoredZipWriter::record(const std::string& name, const char* data, size_t size) {
  const std::string full = prefix_ + name;
  const uint64_t offset = cursor_;
  const std::string zip64 = zip64_field(size >= kMax32, size, 0, offset >= kMax32, offset);
  std::string header;
  put32(header, kZipLocalHeader);
  put16(header, 0);       // version needed
  put16(header, kFlags);  // data descriptor follows; UTF-8 name
  for (int i = 0; i < 3; ++i) put16(header, 0);  // stored; time; date
  for (int i = 0; i < 3; ++i) put32(header, 0);  // CRC and sizes: in the descriptor
  put16(header, static_cast<uint16_t>(full.size()));
  const size_t padding =
      header_size(cursor_, full.size(), zip64.size()) - kLocalHeaderSize - full.size() - zip64.size() - 4;
  put16(header, static_cast<uint16_t>(zip64.size() + padding + 4));
  header += full;
  header += zip64;
  header += "FB";
  put16(header, static_cast<uint16_t>(padding));
  header.append(padding, 'Z');
  emit(header.data(), header.size());
  // A large record's CRC on a second thread, while this one writes it; a
  // small one's piece by piece, just before each piece is written.
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
  put32(descriptor, kZipDataDescriptor);
  put32(descriptor, static_cast<uint32_t>(crc));
  for (int i = 0; i < 2; ++i) zip64.empty() ? put32(descriptor, static_cast<uint32_t>(size)) : put64(descriptor, size);
  emit(descriptor.data(), descriptor.size());
  written_.push_back({full, static_cast<uint32_t>(crc), size, offset});
}

void StoredZipWriter::finish() {
  const uint64_t directory_offset = cursor_;
  std::string tail;
  for (const Written& w : written_) {
    const std::string zip64 = zip64_field(w.size >= kMax32, w.size, w.size, w.offset >= kMax32, w.offset);
    put32(tail, kZipDirectoryEntry);
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
  put32(tail, kZipDirectoryEnd);
  put16(tail, 0);
  put16(tail, 0);
  put16(tail, static_cast<uint16_t>(written_.size()));
  put16(tail, static_cast<uint16_t>(written_.size()));
  put32(tail, clamp32(directory_size));
  put32(tail, clamp32(directory_offset));
  put16(tail, 0);
  emit(tail.data(), tail.size());
}

void StoredZipWriter::emit(const void* data, size_t size) {
  sink_(data, size);
  cursor_ += size;
}

void write_with_libtorch(const ByteSink& sink, const std::vector<char>& pickle,
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

}  // namespace lt::detail
