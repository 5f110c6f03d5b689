#include <lightning_cpp/plugins/io/checked_reader.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/io/zip_format.h>

namespace lt::detail {

namespace {

uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
uint32_t le32(const unsigned char* p) {
  return static_cast<uint32_t>(le16(p)) | static_cast<uint32_t>(le16(p + 2)) << 16;
}
uint64_t le64(const unsigned char* p) {
  return static_cast<uint64_t>(le32(p)) | static_cast<uint64_t>(le32(p + 4)) << 32;
}

uint32_t crc(const void* data, size_t n, uLong c = crc32(0, nullptr, 0)) {
  for (size_t done = 0; done < n;) {  // zlib's length is 32 bits
    const auto piece = static_cast<uInt>(std::min<size_t>(n - done, 1u << 30));
    c = crc32(c, static_cast<const Bytef*>(data) + done, piece);
    done += piece;
  }
  return static_cast<uint32_t>(c);
}

// "" where a record's bytes match its CRC-32 (or it is compressed: not ours to check), else what is wrong.
std::string crc_problem(const std::string& name, bool stored, uint32_t expected, uint32_t computed) {
  if (!stored || computed == expected) return "";
  char hex[64];
  std::snprintf(hex, sizeof hex, "stored %08x, computed %08x", expected, computed);
  return c10::str("record '", name, "' fails its CRC-32 check (", hex, ")");
}

}  // namespace

struct CheckedReader::Mapping {
  char* bytes = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (bytes != nullptr) ::munmap(bytes, size);
  }
};

CheckedReader::CheckedReader(std::string path) : path_(std::move(path)) {
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
  std::string problem = pread_all(0, magic, 4) && le32(magic) == kZipLocalHeader
                            ? read_directory()
                            : "not a zip archive, as torch.save and lightning-cpp write them";
  if (!problem.empty()) {
    ::close(fd_);
    corrupt(problem);
  }
  map_file();
}

CheckedReader::~CheckedReader() { ::close(fd_); }

size_t CheckedReader::size() const { return size_; }

size_t CheckedReader::read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const {
  if (pos >= size_) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, size_ - pos));
  if (!pread_all(pos, buf, n)) return 0;
  auto it = records_.find(pos);
  if (it != records_.end() && it->second.size == n && !check(it->second, buf)) return 0;
  return n;
}

void CheckedReader::check_the_rest() const {
  std::vector<unsigned char> chunk(4 << 20);  // in pieces: a record may be larger than memory
  for (auto& [data, record] : records_) {
    if (record.checked) continue;
    uLong c = crc32(0, nullptr, 0);
    for (uint64_t done = 0; done < record.size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), record.size - done));
      if (!pread_all(data + done, chunk.data(), n)) corrupt(c10::str("record '", record.name, "' cannot be read"));
      c = crc(chunk.data(), n, c);
      done += n;
    }
    const std::string problem = crc_problem(record.name, record.stored, record.crc, static_cast<uint32_t>(c));
    if (!problem.empty()) corrupt(problem);
    record.checked = true;
  }
}

at::DataPtr CheckedReader::mapped_record(const std::string& name) const {
  auto found = by_name_.find(archive_prefix_ + name);
  if (!mapping_ || found == by_name_.end()) return at::DataPtr(nullptr, at::Device(at::kCPU));
  const Record& record = records_.at(found->second);
  if (!record.stored || found->second % 64 != 0 || record.size == 0) return at::DataPtr(nullptr, at::Device(at::kCPU));
  char* data = mapping_->bytes + found->second;
  if (!check(record, data)) throw std::runtime_error(problem_);
  return at::DataPtr(data, new std::shared_ptr<Mapping>(mapping_),
                     [](void* keep) { delete static_cast<std::shared_ptr<Mapping>*>(keep); }, at::Device(at::kCPU));
}

void CheckedReader::corrupt(const std::string& problem) const {
  throw ValueError(c10::str("checkpoint '", path_, "' is truncated or corrupt (", size_, " bytes): ", problem));
}

// A whole record's bytes against its CRC-32, once: false, with problem()
// set, where they fail it.
bool CheckedReader::check(const Record& record, const void* data) const {
  if (record.checked) return true;
  if (std::string problem = crc_problem(record.name, record.stored, record.crc, crc(data, record.size));
      !problem.empty()) {
    problem_ = std::move(problem);
    return false;
  }
  record.checked = true;
  return true;
}

bool CheckedReader::pread_all(uint64_t pos, void* buf, size_t n) const {
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd_, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(pos + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

// What is wrong with the zip directory, or "" (records_ then holds every record).
std::string CheckedReader::read_directory() {
  constexpr uint64_t kEndSize = 22, kMaxComment = 65535;
  if (size_ < kEndSize) return "too short for a zip archive";
  const uint64_t tail_start = size_ > kEndSize + kMaxComment + 20 ? size_ - kEndSize - kMaxComment - 20 : 0;
  std::vector<unsigned char> tail(static_cast<size_t>(size_ - tail_start));
  if (!pread_all(tail_start, tail.data(), tail.size())) return "its end cannot be read";
  size_t end = tail.size() - kEndSize;
  while (le32(&tail[end]) != kZipDirectoryEnd) {
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
    if (at + 46 > dir.size() || le32(&dir[at]) != kZipDirectoryEntry) return "its zip directory is damaged";
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
    if (local + 30 > size_ || !pread_all(local, header, 30) || le32(header) != kZipLocalHeader) {
      return c10::str("record '", name, "' has no header where the directory says");
    }
    const uint64_t data = local + 30 + le16(header + 26) + le16(header + 28);
    if (data + compressed > size_) return c10::str("record '", name, "' runs past the file's end");
    records_.emplace(data, Record{name, compressed, crc, method == 0 && compressed == uncompressed, false});
    at += 46 + rest;
  }
  return "";
}

void CheckedReader::map_file() {
  if (size_ == 0) return;
  void* bytes = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0);
  if (bytes == MAP_FAILED) return;  // read by copies then
  mapping_ = std::make_shared<Mapping>();
  mapping_->bytes = static_cast<char*>(bytes);
  mapping_->size = size_;
  for (const auto& [data, record] : records_) by_name_.emplace(record.name, data);
  // The archive's folder, as LibTorch's reader takes it: its first record's ("archive/data/0": "archive/").
  if (!records_.empty()) {
    const std::string& first = records_.begin()->second.name;
    archive_prefix_ = first.substr(0, first.find('/') + 1);
  }
}

}  // namespace lt::detail
