// Variable-length sequences, bucketed by length, under DDP + lockstep Join.
//
// The task: a sequence of 4..64 digits is "high" when more than half its
// digits are >= 5. Sequences are generated from a seed (no download), padded
// per batch (lt::pad_collate: tokens, tokens_lengths, tokens_mask) and
// batched by LengthBucketBatchSampler with a token budget: short sequences
// make big batches, long ones small, so ranks get different numbers of
// batches of different sizes — uneven inputs, which Join trains. Two loader
// worker threads collate the next batches while the model trains.
//   sequence_bucketing [--devices N] [--epochs N]
// Prints the test accuracy (every sample once, merged across ranks).

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <lightning_cpp/lightning.h>

namespace {

class DigitSequences : public lt::Dataset {
 public:
  DigitSequences(int64_t size, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const torch::Tensor lengths = torch::randint(4, 65, {size}, gen, torch::kLong);
    for (int64_t i = 0; i < size; ++i) {
      const int64_t n = lengths[i].item<int64_t>();
      // A share of high digits around one half, so that the label is not trivial.
      const double share = 0.25 + 0.5 * torch::rand({1}, gen).item<double>();
      const torch::Tensor high = torch::rand({n}, gen) < share;
      const torch::Tensor digit = torch::randint(0, 5, {n}, gen, torch::kLong);
      tokens_.push_back(torch::where(high, digit + 5, digit));
      labels_.push_back(static_cast<int64_t>(high.sum().item<int64_t>() * 2 > n));
    }
  }
  int64_t size() const override { return static_cast<int64_t>(tokens_.size()); }
  lt::Batch get(int64_t i) const override {
    return lt::Batch({{"tokens", tokens_[i]}, {"label", torch::tensor(labels_[i], torch::kLong)}});
  }
  std::vector<int64_t> lengths() const {
    std::vector<int64_t> out;
    for (const auto& t : tokens_) out.push_back(t.size(0));
    return out;
  }

 private:
  std::vector<torch::Tensor> tokens_;
  std::vector<int64_t> labels_;
};

// Embedding, mean over the real positions (the mask), an MLP.
class SequenceClassifier : public lt::LightningModule {
 public:
  SequenceClassifier() {
    embed_ = register_module("embed", torch::nn::Embedding(10, 16));
    fc1_ = register_module("fc1", torch::nn::Linear(16, 32));
    fc2_ = register_module("fc2", torch::nn::Linear(32, 2));
  }
  torch::Tensor forward(const lt::Batch& b) {
    const torch::Tensor mask = b["tokens_mask"].unsqueeze(-1).to(torch::kFloat);
    const torch::Tensor pooled = (embed_(b["tokens"]) * mask).sum(1) / mask.sum(1);
    return fc2_(torch::relu(fc1_(pooled)));
  }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    auto loss = torch::cross_entropy_loss(forward(b), b["label"]);
    log("train_loss", loss);
    return loss;
  }
  void test_step(const lt::Batch& b, int64_t) override {
    log("test_acc", forward(b).argmax(1).eq(b["label"]).to(torch::kFloat).mean(), lt::LogOptions().sync_dist(true));
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
  }

 private:
  torch::nn::Embedding embed_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

std::shared_ptr<lt::DataLoader> bucketed(const std::shared_ptr<DigitSequences>& data, bool shuffle) {
  auto collate = [](const std::vector<lt::Batch>& examples) { return lt::pad_collate(examples); };
  auto loader = std::make_shared<lt::DataLoader>(data, lt::DataLoaderOptions(64).collate(collate).num_workers(2));
  loader->set_batch_sampler(std::make_shared<lt::LengthBucketBatchSampler>(
      data->lengths(), lt::LengthBucketOptions(64).max_tokens(1024).shuffle(shuffle).seed(1)));
  return loader;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t devices = 1, epochs = 4;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--devices") && i + 1 < argc) devices = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = std::stoll(argv[++i]);
    else {
      std::cerr << "usage: sequence_bucketing [--devices N] [--epochs N]\n";
      return 2;
    }
  }
  try {
    auto options = lt::TrainerOptions().max_epochs(epochs).seed(0).enable_progress_bar(false);
    if (devices > 1) options.devices(devices).strategy(std::make_shared<lt::DDPStrategy>());  // Join: the default
    lt::Trainer trainer(options);
    torch::manual_seed(0);
    auto model = std::make_shared<SequenceClassifier>();
    auto train = bucketed(std::make_shared<DigitSequences>(4000, 7), /*shuffle=*/true);
    trainer.fit(model, train);
    // The last epoch's batch counts, rank by rank: bucketing makes them differ.
    const torch::Tensor counts = trainer.strategy().all_gather(torch::tensor({train->size()}, torch::kLong));
    auto metrics = trainer.test(model, bucketed(std::make_shared<DigitSequences>(1000, 8), /*shuffle=*/false));
    if (trainer.is_global_zero()) {
      std::string per_rank;
      const torch::Tensor flat = counts.flatten();
      for (int64_t r = 0; r < flat.numel(); ++r) per_rank += c10::str(r ? ", " : "", flat[r].item<int64_t>());
      std::printf("training batches per rank: %s\n", per_rank.c_str());
      std::printf("sequence test accuracy: %.4f\n", metrics["test_acc"]);
    }
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
  return 0;
}
