// plugins/io/zip_writer.h: the streamed zip writer writes what LibTorch's
// writer (miniz) writes for the same records, and says which archives it
// leaves to LibTorch's writer.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <caffe2/serialize/inline_container.h>

#include <lightning_cpp/plugins/io/zip_writer.h>

namespace {

using lt::detail::StoredZipWriter;

// A record's bytes: a pattern that differs at every offset within 251 bytes.
std::string pattern(size_t size, unsigned seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 7 + seed) % 251);
  return bytes;
}

// LibTorch 2.x's writer adds records of its own after ours (byteorder,
// .data/serialization_id): what comes before our central directory is compared.
std::string before_directory(const std::string& archive) {
  return archive.substr(0, archive.find(std::string("PK\x01\x02", 4)));
}

TEST(StoredZipWriter, WritesTheRecordsLibTorchsWriterWrites) {
  // Odd sizes (each next header starts unaligned), a 64-byte one, and one of
  // 9 MiB, whose CRC-32 is taken on a second thread while it is written.
  const std::vector<std::pair<std::string, std::string>> records = {
      {"data/0", pattern(1001, 1)}, {"data/1", pattern(64, 2)}, {"data/2", pattern(size_t{9} << 20, 3)},
      {"data.pkl", pattern(37, 4)}};
  std::string ours, theirs;
  auto append = [&](const void* data, size_t size) { ours.append(static_cast<const char*>(data), size); };
  StoredZipWriter zip("archive", append);
  for (const auto& [name, bytes] : records) zip.record(name, bytes.data(), bytes.size());
  // LibTorch's writer writes its version record itself, at its end.
  const std::string version = std::to_string(caffe2::serialize::kMinProducedFileFormatVersion) + "\n";
  zip.record("version", version.data(), version.size());
  zip.finish();
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      theirs.append(static_cast<const char*>(data), size);
      return size;
    });
    for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
    writer.writeEndOfFile();
  }
  const std::string prefix = before_directory(ours);
  ASSERT_LT(prefix.size(), ours.size()) << "no central directory in our archive";
  ASSERT_GE(theirs.size(), prefix.size());
  for (size_t i = 0; i < prefix.size(); ++i) {
    ASSERT_EQ(prefix[i], theirs[i]) << "first difference at byte " << i << " of " << prefix.size();
  }
}

TEST(StoredZipWriter, ItsDirectoryEndsTheArchiveWithMinizsZip64Records) {
  std::string ours;
  auto append = [&](const void* data, size_t size) { ours.append(static_cast<const char*>(data), size); };
  StoredZipWriter zip("archive", append);
  const std::string bytes = pattern(100, 5);
  zip.record("data/0", bytes.data(), bytes.size());
  zip.record("version", "3\n", 2);
  zip.finish();
  // The end of central directory record is the last 22 bytes, and counts both records.
  ASSERT_GT(ours.size(), 22u);
  const std::string end = ours.substr(ours.size() - 22);
  EXPECT_EQ(end.substr(0, 4), std::string("PK\x05\x06", 4));
  EXPECT_EQ(static_cast<unsigned char>(end[10]), 2u);  // entries, little endian
  // miniz always writes the zip64 end record and its locator before it.
  EXPECT_NE(ours.find(std::string("PK\x06\x06", 4)), std::string::npos);
  EXPECT_EQ(ours.substr(ours.size() - 22 - 20, 4), std::string("PK\x06\x07", 4));
  // Two local headers and two directory entries, each naming its record under the archive's folder.
  size_t names = 0;
  for (size_t at = ours.find("archive/data/0"); at != std::string::npos; at = ours.find("archive/data/0", at + 1)) {
    ++names;
  }
  EXPECT_EQ(names, 2u);
}

TEST(StoredZipWriter, LeavesEmptyRecordsAndHugeArchivesToLibTorchsWriter) {
  EXPECT_TRUE(StoredZipWriter::writes({{"data/0", 4}, {"data.pkl", 10}, {"version", 2}}));
  EXPECT_FALSE(StoredZipWriter::writes({{"data/0", 0}, {"data.pkl", 10}, {"version", 2}}));
  std::vector<std::pair<std::string, size_t>> many(0xfffe, {"data/x", 1});
  EXPECT_TRUE(StoredZipWriter::writes(many));
  many.emplace_back("data/y", 1);
  EXPECT_FALSE(StoredZipWriter::writes(many));
}

TEST(StoredZipWriter, LibTorchsWriterRethrowsTheSinksFailureOnceItHasReturned) {
  const std::vector<char> pickle(16, 'p');
  int calls = 0;
  auto failing = [&](const void*, size_t) {
    if (++calls == 2) throw std::runtime_error("disk full");
  };
  try {
    lt::detail::write_with_libtorch(failing, pickle, {});
    ADD_FAILURE() << "the sink's failure was not thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  // No call after the failure reached the sink.
  EXPECT_EQ(calls, 2);
}

}  // namespace
