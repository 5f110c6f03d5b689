// Data: loaders, samplers and the Fashion-MNIST IDX reader.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/fashion_mnist.h>

namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const lt::ValueError& e) {
    return e.what();
  }
  return "<no error>";
}

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("lt_data_test_" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

void write_bytes(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(DataLoader, BatchesCoverTheDatasetInSamplerOrder) {
  auto ds = std::make_shared<lt::TensorDataset>(torch::arange(10).unsqueeze(1), torch::arange(10));
  lt::DataLoader loader(ds, lt::DataLoaderOptions(4));
  ASSERT_EQ(loader.size(), 3);
  EXPECT_TRUE(torch::equal(loader.get(2).target, torch::tensor({8, 9})));
  lt::DataLoader dropping(ds, lt::DataLoaderOptions(4).drop_last(true));
  EXPECT_EQ(dropping.size(), 2);
}

TEST(DataLoader, ShuffleIsTorchRandpermOfSeedPlusEpoch) {
  auto ds = std::make_shared<lt::TensorDataset>(torch::arange(8).unsqueeze(1), torch::arange(8));
  lt::DataLoader loader(ds, lt::DataLoaderOptions(8).shuffle(true).seed(5));
  loader.set_epoch(2);
  auto expected = torch::randperm(8, at::detail::createCPUGenerator(7), torch::kLong);
  EXPECT_TRUE(torch::equal(loader.get(0).target, expected));
}

TEST(FashionMnist, RealFilesHaveTheExpectedShapesAndLabels) {
  if (!fs::exists(std::string(lt::kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  auto test = lt::load_fashion_mnist(lt::kFashionMnistDir, /*train=*/false);
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(test.labels.sizes(), (std::vector<int64_t>{10000}));
  EXPECT_EQ(test.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(test.labels.max().item<int64_t>(), 9);
  EXPECT_EQ(test.labels.bincount().min().item<int64_t>(), 1000);  // balanced classes
  auto raw = lt::read_idx_file(std::string(lt::kFashionMnistDir) + "/train-images-idx3-ubyte.gz");
  EXPECT_EQ(raw.sizes(), (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(raw.scalar_type(), torch::kUInt8);
}

TEST(FashionMnist, MissingFileNamesThePathAndThePackage) {
  TempDir dir;
  const std::string msg = error_of([&] { lt::load_fashion_mnist(dir.path.string(), true); });
  EXPECT_NE(msg.find(dir.path.string() + "/train-images-idx3-ubyte.gz' not found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
}

TEST(FashionMnist, TruncatedAndMalformedFilesAreClearErrors) {
  TempDir dir;
  // A labels header announcing 100 labels, followed by 10.
  std::vector<uint8_t> truncated = {0, 0, 8, 1, 0, 0, 0, 100};
  truncated.resize(8 + 10, 3);
  write_bytes(dir.path / "short.idx", truncated);
  std::string msg = error_of([&] { lt::read_idx_file((dir.path / "short.idx").string()); });
  EXPECT_NE(msg.find("is truncated or has trailing data: header says 100 bytes of data, file has 10"),
            std::string::npos)
      << msg;

  write_bytes(dir.path / "magic.idx", {0x1f, 0x00, 0x08, 0x01, 0, 0, 0, 0});
  msg = error_of([&] { lt::read_idx_file((dir.path / "magic.idx").string()); });
  EXPECT_NE(msg.find("bad magic number"), std::string::npos) << msg;

  // A gzip stream cut in the middle.
  std::vector<uint8_t> payload(4096);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 7919 % 251);
  const std::string gz = (dir.path / "cut.gz").string();
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, payload.data(), static_cast<unsigned>(payload.size()));
  gzclose(f);
  fs::resize_file(gz, fs::file_size(gz) / 2);
  msg = error_of([&] { lt::read_idx_file(gz); });
  EXPECT_NE(msg.find("is corrupt (gzip:"), std::string::npos) << msg;
}

}  // namespace
