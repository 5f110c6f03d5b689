// plugins/io/checked_reader.h: the reader checks the zip directory when it
// opens a file and each record's CRC-32 before a byte of it is used, where
// LibTorch's own reader loads a flipped byte silently.
#include <cstring>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/io/checked_reader.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>

#include "io/io_fixture.h"

namespace {

using lt::detail::CheckedReader;

struct CheckedReaderTest : lt::testing::IoTest {
  // A checkpoint of one tensor whose bytes (0, 1, ..., 63) are easy to find in the file.
  std::string save() {
    weights_ = torch::arange(64, torch::kUInt8);
    c10::Dict<std::string, torch::Tensor> state;
    state.insert("w", weights_);
    const std::string file = path("w.pt");
    lt::atomic_pickle_save(state, file);
    return file;
  }
  // Flips a bit of the tensor's bytes in the file.
  void flip_a_weight(const std::string& file) {
    std::string bytes = bytes_of(file);
    const size_t at = bytes.find(std::string(static_cast<const char*>(weights_.data_ptr()), 64));
    ASSERT_NE(at, std::string::npos);
    bytes[at + 10] ^= 0x01;
    write_bytes(file, bytes);
  }
  static std::string message_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const lt::ValueError& e) {
      return e.what();
    }
    return "(no ValueError)";
  }
  torch::Tensor weights_;
};

TEST_F(CheckedReaderTest, ReadsAWholeFileAndItsRecordsPassTheirCrc) {
  const std::string file = save();
  CheckedReader reader(file);
  EXPECT_EQ(reader.size(), bytes_of(file).size());
  EXPECT_NO_THROW(reader.check_the_rest());
  EXPECT_TRUE(lt::pickle_load_file(file).toGenericDict().at("w").toTensor().equal(weights_));
}

TEST_F(CheckedReaderTest, RefusesAFileWhoseCrcIsWrong) {
  const std::string file = save();
  flip_a_weight(file);
  CheckedReader reader(file);  // the directory is whole: opening succeeds
  const std::string checked = message_of([&] { reader.check_the_rest(); });
  EXPECT_NE(checked.find("record 'archive/data/0' fails its CRC-32 check"), std::string::npos) << checked;
  EXPECT_NE(checked.find("checkpoint '" + file + "' is truncated or corrupt"), std::string::npos) << checked;
  const std::string loaded = message_of([&] { lt::pickle_load_file(file); });
  EXPECT_NE(loaded.find("fails its CRC-32 check"), std::string::npos) << loaded;
  EXPECT_THROW(lt::check_checkpoint_file(file), lt::ValueError);
}

TEST_F(CheckedReaderTest, MapsAStoredRecordAndChecksItBeforeHandingItOver) {
  const std::string file = save();
  {
    CheckedReader reader(file);
    const at::DataPtr mapped = reader.mapped_record("data/0");
    ASSERT_NE(mapped.get(), nullptr) << "the record of a file lightning-cpp wrote is mapped";
    EXPECT_EQ(std::memcmp(mapped.get(), weights_.data_ptr(), 64), 0);
    EXPECT_EQ(reader.mapped_record("data/7").get(), nullptr);  // no such record: the caller reads it otherwise
  }
  flip_a_weight(file);
  CheckedReader reader(file);
  EXPECT_THROW(reader.mapped_record("data/0"), std::runtime_error);
  EXPECT_NE(reader.problem().find("fails its CRC-32 check"), std::string::npos) << reader.problem();
}

TEST_F(CheckedReaderTest, RefusesAFileWhoseDirectoryIsDamaged) {
  const std::string file = save();
  std::string bytes = bytes_of(file);
  const size_t entry = bytes.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(entry, std::string::npos);
  bytes[entry + 3] = 0x03;
  write_bytes(file, bytes);
  const std::string message = message_of([&] { CheckedReader reader(file); });
  EXPECT_NE(message.find("its zip directory is damaged"), std::string::npos) << message;
}

TEST_F(CheckedReaderTest, RefusesATruncatedFile) {
  const std::string file = save();
  const std::string bytes = bytes_of(file);
  write_bytes(file, bytes.substr(0, bytes.size() - 30));
  const std::string message = message_of([&] { CheckedReader reader(file); });
  EXPECT_NE(message.find("is truncated or corrupt (" + std::to_string(bytes.size() - 30) + " bytes)"),
            std::string::npos) << message;
}

TEST_F(CheckedReaderTest, RefusesWhatIsNoZipArchiveAndWhatIsNoFile) {
  const std::string text = path("text.ckpt");
  write_bytes(text, "not a checkpoint");
  const std::string message = message_of([&] { CheckedReader reader(text); });
  EXPECT_NE(message.find("not a zip archive"), std::string::npos) << message;
  EXPECT_NE(message_of([&] { CheckedReader reader(path("missing.ckpt")); }).find("does not exist"), std::string::npos);
  EXPECT_NE(message_of([&] { CheckedReader reader(dir_.string()); }).find("is a folder with no meta.pt"),
            std::string::npos);
}

}  // namespace
