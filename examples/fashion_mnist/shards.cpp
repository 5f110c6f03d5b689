// Per-rank data that is naturally uneven: each rank trains on its own shard
// files, of different sizes, under DDP + lockstep Join + gradient accumulation.
//
//   fashion_mnist_shards write DIR [--ranks 2]
//       splits the 60000 training images into shard files of 2000 images,
//       rank r getting r + 1 parts of them (2 ranks: a third and two thirds):
//       DIR/rank<r>-<i>.pt, each a pickled {"images": uint8 [N, 28, 28],
//       "labels": int64 [N]} (torch.load reads them too).
//   fashion_mnist_shards train DIR [--devices 2] [--epochs 2] [--accumulate 2] [--workers 2]
//       each rank streams DIR/rank<its rank>-*.pt only (an lt::IterableDataset
//       of unknown length: one file in memory at a time, files and rows in a
//       seeded order per epoch), read by loader worker threads that each take
//       every other file; ranks run different numbers of batches per epoch
//       and Join keeps them in step. Prints the accuracy on the 10000 test
//       images (sharded by the strategy, merged exactly).

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/data/sampler.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/launchers/error_file.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "fashion_mnist/fashion_mnist.h"

namespace fs = std::filesystem;

namespace {

constexpr int64_t kShardSize = 2000;

int write_shards(const fs::path& dir, int64_t ranks) {
  const torch::Tensor images = lt::read_idx_file(std::string(lt::kFashionMnistDir) + "/train-images-idx3-ubyte.gz");
  const torch::Tensor labels =
      lt::read_idx_file(std::string(lt::kFashionMnistDir) + "/train-labels-idx1-ubyte.gz").to(torch::kLong);
  const int64_t shards = images.size(0) / kShardSize;
  // Rank r gets weight r + 1 of the shards, in turn: uneven on purpose.
  int64_t total_weight = 0;
  for (int64_t r = 0; r < ranks; ++r) total_weight += r + 1;
  fs::create_directories(dir);
  int64_t next = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    const int64_t count = r + 1 == ranks ? shards - next : shards * (r + 1) / total_weight;
    for (int64_t i = 0; i < count; ++i, ++next) {
      lt::StateDict shard = lt::new_state_dict();
      shard.insert("images", images.narrow(0, next * kShardSize, kShardSize).clone());
      shard.insert("labels", labels.narrow(0, next * kShardSize, kShardSize).clone());
      lt::atomic_pickle_save(shard, (dir / c10::str("rank", r, "-", i, ".pt")).string());
    }
    std::printf("rank %ld: %ld shards (%ld images)\n", static_cast<long>(r), static_cast<long>(count),
                static_cast<long>(count * kShardSize));
  }
  return 0;
}

// This rank's shard files, read one at a time: each epoch, the files in a
// seeded order and each file's rows shuffled, normalized as the example's
// data module does; loader worker w of W reads the files w, w + W, ... of
// that order. Its length is not told: the loop finds the end.
class ShardStream : public lt::IterableDataset {
 public:
  explicit ShardStream(fs::path dir) : dir_(std::move(dir)) {}
  std::unique_ptr<lt::ExampleStream> open(int64_t epoch, const lt::StreamShard& shard) const override {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(c10::str("rank", shard.rank, "-"), 0) == 0) files.push_back(entry.path().string());
    }
    LT_CHECK_VALUE(!files.empty(), "no shard files rank", shard.rank, "-*.pt in ", dir_.string(),
                   " (write them with: fashion_mnist_shards write ", dir_.string(), ")");
    std::sort(files.begin(), files.end());
    const uint64_t seed = static_cast<uint64_t>(1000 * shard.rank + epoch);
    std::vector<std::string> mine;
    const std::vector<int64_t> order = lt::seeded_permutation(static_cast<int64_t>(files.size()), seed);
    for (size_t i = static_cast<size_t>(shard.worker); i < order.size(); i += static_cast<size_t>(shard.num_workers)) {
      mine.push_back(files[order[i]]);
    }
    return std::make_unique<Stream>(std::move(mine), seed + 104729 * static_cast<uint64_t>(shard.worker));
  }

 private:
  class Stream : public lt::ExampleStream {
   public:
    Stream(std::vector<std::string> files, uint64_t seed) : files_(std::move(files)), seed_(seed) {}
    std::optional<lt::Batch> next() override {
      while (row_ >= rows_) {
        if (file_ >= files_.size()) return std::nullopt;
        const auto shard = lt::pickle_load_file(files_[file_]).toGenericDict();
        const torch::Tensor order = torch::tensor(lt::seeded_permutation(
            shard.at("labels").toTensor().size(0), seed_ + 7919 * static_cast<uint64_t>(file_)));
        images_ = (shard.at("images").toTensor().index_select(0, order).to(torch::kFloat).div(255.0).unsqueeze(1) -
                   0.2860) / 0.3530;
        labels_ = shard.at("labels").toTensor().index_select(0, order);
        rows_ = labels_.size(0);
        row_ = 0;
        ++file_;
      }
      ++row_;
      return lt::Batch(images_[row_ - 1], labels_[row_ - 1]);
    }

   private:
    std::vector<std::string> files_;
    uint64_t seed_;
    size_t file_ = 0;
    torch::Tensor images_, labels_;
    int64_t rows_ = 0, row_ = 0;
  };
  fs::path dir_;
};

// Training data: this rank's shard stream; test data: the 10000 test images, which the strategy shards.
class ShardsDataModule : public lt::DataModule {
 public:
  ShardsDataModule(fs::path dir, int64_t workers) : dir_(std::move(dir)), workers_(workers) {}
  void setup(lt::Stage stage) override {
    if (stage == lt::Stage::kTrain) {
      // The strategy tells the stream its rank, the loader each worker's number (StreamShard).
      train_ = std::make_shared<lt::DataLoader>(std::make_shared<ShardStream>(dir_),
                                                lt::DataLoaderOptions(64).num_workers(workers_));
    } else {
      const lt::FashionMnistSplit test = lt::load_fashion_mnist(lt::kFashionMnistDir, /*train=*/false);
      test_ = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(test.images, test.labels),
                                               lt::DataLoaderOptions(256));
    }
  }
  std::shared_ptr<lt::DataLoader> train_dataloader() override { return train_; }
  std::shared_ptr<lt::DataLoader> test_dataloader() override { return test_; }

 private:
  fs::path dir_;
  int64_t workers_;
  std::shared_ptr<lt::DataLoader> train_, test_;
};

int train(const fs::path& dir, int64_t devices, int64_t epochs, int64_t accumulate, int64_t workers) {
  auto options = lt::TrainerOptions()
                     .max_epochs(epochs)
                     .accumulate_grad_batches(accumulate)
                     .enable_progress_bar(false)
                     .seed(0);
  if (devices > 1) options.devices(devices).strategy(std::make_shared<lt::DDPStrategy>());  // Join: the default
  lt::Trainer trainer(options);
  torch::manual_seed(0);
  auto model = std::make_shared<lt::examples::MlpClassifier>();
  auto data = std::make_shared<ShardsDataModule>(dir, workers);
  trainer.fit(model, data);  // a local-spawn supervisor launches the workers here and exits with them
  // Every rank's batch count, and the test accuracy of the trained replicas.
  const torch::Tensor counts =
      trainer.strategy().all_gather(torch::tensor({trainer.state().num_training_batches}, torch::kLong)).flatten();
  const auto metrics = trainer.test(model, data);
  if (trainer.is_global_zero()) {
    std::string per_rank;
    for (int64_t r = 0; r < counts.numel(); ++r) per_rank += c10::str(r ? ", " : "", counts[r].item<int64_t>());
    std::printf("training batches per rank: %s\n", per_rank.c_str());
    std::printf("shards test accuracy: %.4f\n", metrics.at("test_acc"));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string usage =
      "usage: fashion_mnist_shards write DIR [--ranks N] | train DIR [--devices N] [--epochs N] [--accumulate K] "
      "[--workers W]\n";
  if (argc < 3) {
    std::cerr << usage;
    return 2;
  }
  const std::string command = argv[1];
  const fs::path dir = argv[2];
  int64_t ranks = 2, devices = 2, epochs = 2, accumulate = 2, workers = 2;
  for (int i = 3; i < argc; ++i) {
    auto value = [&]() -> int64_t { return i + 1 < argc ? std::stoll(argv[++i]) : 0; };
    if (!std::strcmp(argv[i], "--ranks")) ranks = value();
    else if (!std::strcmp(argv[i], "--devices")) devices = value();
    else if (!std::strcmp(argv[i], "--epochs")) epochs = value();
    else if (!std::strcmp(argv[i], "--accumulate")) accumulate = value();
    else if (!std::strcmp(argv[i], "--workers")) workers = value();
    else {
      std::cerr << usage;
      return 2;
    }
  }
  try {
    if (command == "write") return write_shards(dir, ranks);
    if (command == "train") return train(dir, devices, epochs, accumulate, workers);
    std::cerr << usage;
    return 2;
  } catch (const lt::Interrupted& e) {
    // A signal stopped training: nothing failed; the message names the checkpoint to resume from.
    std::fprintf(stderr, "%s\n", e.what());
    return lt::kExitStoppedOnRequest;
  } catch (const lt::ValueError& e) {
    lt::report_failure(std::cerr, e.what());
    return 2;
  } catch (const std::exception& e) {
    lt::report_failure(std::cerr, e.what());
    return 1;
  }
}
