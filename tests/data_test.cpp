// Data: loaders, samplers and the Fashion-MNIST IDX reader.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/batch_sampler.h>
#include <lightning_cpp/data/collate.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/fashion_mnist.h>
#include <lightning_cpp/trainer/trainer.h>

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

// -- structured batches and collate ----------------------------------------------------

TEST(Batch, NamedTensorsBesideDataAndTarget) {
  lt::Batch b({{"tokens", torch::zeros({3, 5}, torch::kLong)}, {"label", torch::ones({3})}});
  EXPECT_EQ(b.size(), 3);
  EXPECT_TRUE(b.contains("tokens") && !b.contains("data"));
  EXPECT_EQ(b["label"].sum().item<double>(), 3.0);
  EXPECT_EQ(error_of([&] { (void)b["lengths"]; }), "batch has no tensor 'lengths'; it has: label, tokens");
  EXPECT_EQ(b.describe(), "label [3] Float, tokens [3, 5] Long");
  const lt::Batch half = b.map([](const torch::Tensor& t) { return t.narrow(0, 0, 1); });
  EXPECT_EQ(half.size(), 1);
  EXPECT_EQ(half["tokens"].sizes(), (std::vector<int64_t>{1, 5}));
  // The (data, target) shorthand and LibTorch's Example are batches too.
  lt::Batch pair = torch::data::Example<>(torch::ones({2, 4}), torch::zeros({2}));
  EXPECT_EQ(pair["data"].size(1), 4);
  EXPECT_EQ(pair.describe(), "data [2, 4] Float, target [2] Float");
}

TEST(Collate, StacksEveryKeyAndNamesAMismatch) {
  std::vector<lt::Batch> examples;
  for (int i = 0; i < 3; ++i) {
    lt::Batch e(torch::full({2}, i), torch::tensor(i));
    e.fields["weight"] = torch::tensor(0.5 * i);
    examples.push_back(e);
  }
  const lt::Batch b = lt::collate(examples);
  EXPECT_EQ(b.data.sizes(), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(b["weight"].equal(torch::tensor({0.0, 0.5, 1.0}, torch::kDouble).to(b["weight"].dtype())));
  examples[2].data = torch::ones({5}, torch::kLong);
  EXPECT_EQ(error_of([&] { lt::collate(examples); }),
            "collate: 'data' of example 2 has shape [5] but example 0 has [2]; for variable-length examples use "
            "lt::pad_collate");
  examples[2].data = torch::ones({2}, torch::kLong);
  examples[2].fields.clear();
  EXPECT_NE(error_of([&] { lt::collate(examples); }).find("collate: example 2 has no 'weight'"), std::string::npos);
}

TEST(Collate, PadCollatePadsSequencesAndAddsLengthsAndMask) {
  std::vector<lt::Batch> examples;
  for (int64_t n : {3, 1, 2}) {
    examples.emplace_back(std::map<std::string, torch::Tensor>{
        {"tokens", torch::arange(1, n + 1, torch::kLong)}, {"label", torch::tensor(n % 2, torch::kLong)}});
  }
  const lt::Batch b = lt::pad_collate(examples, lt::PadCollateOptions().padding_value(-1));
  EXPECT_TRUE(b["tokens"].equal(torch::tensor({1, 2, 3, 1, -1, -1, 1, 2, -1}, torch::kLong).view({3, 3})));
  EXPECT_TRUE(b["tokens_lengths"].equal(torch::tensor({3, 1, 2}, torch::kLong)));
  EXPECT_TRUE(b["tokens_mask"].equal(b["tokens"].ne(-1)));
  EXPECT_TRUE(b["label"].equal(torch::tensor({1, 1, 0}, torch::kLong)));
  EXPECT_FALSE(b.contains("label_lengths"));  // a scalar per example: stacked
  // Sequences of one length get lengths and a mask too: every batch has the same keys.
  const lt::Batch even = lt::pad_collate({examples[0], examples[0]});
  EXPECT_TRUE(even["tokens_mask"].all().item<bool>());
  EXPECT_EQ(error_of([&] { lt::pad_collate(examples, lt::PadCollateOptions().keys({"label"})); }),
            "pad_collate: 'label' is a 0-dim tensor, not a sequence");
}

// A dict-batch dataset of sequences whose length differs from batch to
// batch trains: the loop's batch check asks for the same keys, dtypes and
// ranks only.
TEST(Collate, VariableLengthDictBatchesTrain) {
  class Sequences : public lt::Dataset {
   public:
    int64_t size() const override { return 24; }
    lt::Batch get(int64_t i) const override {
      const int64_t n = 1 + i % 5;
      return lt::Batch({{"x", torch::full({n, 3}, 0.1 * static_cast<double>(i), torch::kFloat)},
                        {"y", torch::tensor(static_cast<float>(n))}});
    }
  };
  struct Model : lt::LightningModule {
    Model() { fc = register_module("fc", torch::nn::Linear(3, 1)); }
    torch::Tensor training_step(const lt::Batch& b, int64_t) override {
      const torch::Tensor mask = b["x_mask"].unsqueeze(-1).to(torch::kFloat);
      const torch::Tensor pooled = (b["x"] * mask).sum(1) / b["x_lengths"].unsqueeze(1).to(torch::kFloat);
      lengths.insert(b["x"].size(1));
      return torch::mse_loss(fc(pooled).squeeze(1), b["y"]);
    }
    lt::OptimizerConfig configure_optimizers() override {
      return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01));
    }
    torch::nn::Linear fc{nullptr};
    std::set<int64_t> lengths;
  };
  auto model = std::make_shared<Model>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).enable_progress_bar(false).default_root_dir(
      (fs::temp_directory_path() / ("lt_data_test_seq_" + std::to_string(::getpid()))).string()));
  auto pad = [](const std::vector<lt::Batch>& examples) { return lt::pad_collate(examples); };
  trainer.fit(model, std::make_shared<lt::DataLoader>(std::make_shared<Sequences>(),
                                                      lt::DataLoaderOptions(3).collate(pad)));
  EXPECT_EQ(trainer.global_step(), 8);
  EXPECT_GT(model->lengths.size(), 1u) << "every batch had the same padded length";
  fs::remove_all(fs::temp_directory_path() / ("lt_data_test_seq_" + std::to_string(::getpid())));
}

TEST(LengthBucketBatchSampler, EverySampleOnceBatchesOfSimilarLengthWithinMaxTokens) {
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < 203; ++i) lengths.push_back(1 + (i * 37) % 50);
  for (int world = 1; world <= 3; ++world) {
    std::vector<int64_t> seen;
    int64_t span = 0, num_batches = 0;  // lengths 1..50 at random: an unsorted batch of 16 spans ~45
    for (int rank = 0; rank < world; ++rank) {
      const lt::LengthBucketBatchSampler sampler(
          lengths, lt::LengthBucketOptions(16).max_tokens(200).bucket_batches(4).seed(3).num_replicas(world).rank(rank));
      const auto batches = sampler.batches(1);
      for (const auto& batch : batches) {
        int64_t shortest = 1000, longest = 0;
        for (int64_t i : batch) {
          seen.push_back(i);
          shortest = std::min(shortest, lengths[i]);
          longest = std::max(longest, lengths[i]);
        }
        EXPECT_LE(static_cast<int64_t>(batch.size()), 16);
        EXPECT_TRUE(batch.size() == 1 || static_cast<int64_t>(batch.size()) * longest <= 200);
        span += longest - shortest;
        ++num_batches;
      }
      // The same epoch gives the same batches; the next epoch others; sharded() is the same sampler.
      EXPECT_EQ(batches, sampler.batches(1));
      EXPECT_NE(batches, sampler.batches(2));
      const lt::LengthBucketBatchSampler whole(lengths, lt::LengthBucketOptions(16).max_tokens(200).bucket_batches(4).seed(3));
      EXPECT_EQ(batches, whole.sharded(rank, world)->batches(1));
    }
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(lengths.size());
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(seen, all) << "world " << world;
    EXPECT_LT(span, 10 * num_batches) << "batches of sorted buckets span few lengths";
  }
  EXPECT_NE(error_of([&] { lt::LengthBucketBatchSampler(lengths, lt::LengthBucketOptions(4).num_replicas(2).rank(2)); }),
            "<no error>");
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
  // Normalized in place, to bitwise the values of the plain expression.
  auto raw_test = lt::read_idx_file(std::string(lt::kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz");
  EXPECT_TRUE(test.images.squeeze(1).equal((raw_test.to(torch::kFloat32) / 255.0 - 0.2860) / 0.3530));
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

  // A header announcing far more than the file can hold is refused before anything is allocated for it.
  write_bytes(dir.path / "huge.idx", {0, 0, 8, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  msg = error_of([&] { lt::read_idx_file((dir.path / "huge.idx").string()); });
  EXPECT_NE(msg.find("more data than a file of 16 bytes can hold"), std::string::npos) << msg;
  // Sizes whose product wraps around 64 bits to 0 (2^17 * 2^16 * 2^31), in a file large enough to pass the
  // first two: refused, not allocated.
  std::vector<uint8_t> wrapping = {0, 0, 8, 3, 0, 2, 0, 0, 0, 1, 0, 0, 0x80, 0, 0, 0};
  wrapping.resize(wrapping.size() + (8 << 20), 0);
  write_bytes(dir.path / "wrap.idx", wrapping);
  msg = error_of([&] { lt::read_idx_file((dir.path / "wrap.idx").string()); });
  EXPECT_NE(msg.find("more data than a file of " + std::to_string(wrapping.size()) + " bytes can hold"),
            std::string::npos)
      << msg;

  // Data after what the header announces.
  std::vector<uint8_t> trailing = {0, 0, 8, 1, 0, 0, 0, 2, 5, 6, 7};
  write_bytes(dir.path / "long.idx", trailing);
  msg = error_of([&] { lt::read_idx_file((dir.path / "long.idx").string()); });
  EXPECT_NE(msg.find("header says 2 bytes of data, file has 3"), std::string::npos) << msg;

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
