// bench/parity: the Trainer against a hand-written LibTorch loop on the same
// MLP, the same data and the same number of steps, in the same process.
// The two run interleaved every 50 steps within one round (interleaved()),
// so that a round's ratio does not move with what drifts between rounds
// (separate rounds' ratios spread over 0.94-1.21 here); prints the wall time
// of each (median of the rounds) and the ratio with the rounds' spread.
// Target: Trainer / hand-written <= 1.03. Then the Trainer with
// precision bf16-mixed against 32-true (issue 16: report what this CPU does).
//
// Both loops run with glibc's heap kept (mallopt below): with its defaults
// a loop that frees the step's few MB at the top of the heap can hand them
// back to the kernel and fault them in again every step, which cost the
// hand-written loop 4.6x here (2026-12-05) and the Trainer nothing, by
// where its long-lived allocations happened to lie.
//
//   parity [--steps N] [--repeats R]

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/fused_optimizer.h>
#include <lightning_cpp/data/fashion_mnist.h>
#include <lightning_cpp/trainer/trainer.h>

#include "machine_limit.h"

namespace {

// Steps of each loop between switches when they run interleaved.
constexpr int64_t kChunk = 50;

class Mlp : public lt::LightningModule {
 public:
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 256));
    fc2 = register_module("fc2", torch::nn::Linear(256, 256));
    fc3 = register_module("fc3", torch::nn::Linear(256, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x.flatten(1))))));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t) override {
    return torch::cross_entropy_loss(forward(batch.data), batch.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-3));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

std::shared_ptr<lt::TensorDataset> data(int64_t n, bool* real) {
  const std::string dir = lt::kFashionMnistDir;
  *real = std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz");
  if (*real) {
    auto split = lt::load_fashion_mnist(dir, true);
    return std::make_shared<lt::TensorDataset>(split.images.slice(0, 0, n), split.labels.slice(0, 0, n));
  }
  return std::make_shared<lt::TensorDataset>(torch::randn({n, 1, 28, 28}), torch::randint(0, 10, {n}));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::shared_ptr<Mlp> seeded_mlp() {
  torch::manual_seed(0);
  return std::make_shared<Mlp>();
}

// The loop a user writes, with its own model, optimizer and loader. fused:
// the step as the Trainer takes it (lt::step_optimizer), so that a ratio is
// what the Trainer's machinery costs; else optimizer.step(), as a user writes.
class HandWritten {
 public:
  HandWritten(const lt::TensorDataset& ds, int64_t batch_size, bool fused)
      : model_(seeded_mlp()),
        optimizer_(model_->parameters(), torch::optim::AdamOptions(1e-3)),
        loader_(std::make_shared<lt::TensorDataset>(ds), lt::DataLoaderOptions(batch_size).shuffle(true)),
        fused_(fused) {}
  // The next `steps` steps.
  void run(int64_t steps) {
    for (int64_t end = step_ + steps; step_ < end; ++step_) {
      const int64_t batch_idx = step_ % loader_.size();
      if (batch_idx == 0) loader_.set_epoch(step_ / loader_.size());  // epochs, as the Trainer's
      auto batch = loader_.get(batch_idx);
      auto loss = torch::cross_entropy_loss(model_->forward(batch.data), batch.target);
      loss.backward();
      if (fused_) lt::step_optimizer(optimizer_);
      else optimizer_.step();
      optimizer_.zero_grad();
    }
  }

 private:
  std::shared_ptr<Mlp> model_;
  torch::optim::Adam optimizer_;
  lt::DataLoader loader_;
  bool fused_;
  int64_t step_ = 0;
};

// The Trainer's fit of `steps` steps, set-up included.
double with_trainer(const std::shared_ptr<lt::TensorDataset>& ds, int64_t batch_size, int64_t steps,
                    const std::string& precision = "32-true") {
  auto model = seeded_mlp();
  auto loader = std::make_shared<lt::DataLoader>(ds, lt::DataLoaderOptions(batch_size).shuffle(true));
  // No logger, summary or bar: the hand-written loop has none (Lightning's own benchmarks run so too).
  lt::Trainer trainer(lt::TrainerOptions().max_steps(steps).precision(precision)
                          .default_logger(false)
                          .enable_progress_bar(false).enable_model_summary(false));
  const auto t0 = std::chrono::steady_clock::now();
  trainer.fit(model, loader);
  return seconds_since(t0);
}

// The Trainer's fit (as with_trainer's) and the hand-written loop (`fused`:
// stepping as the Trainer does), interleaved: after every `chunk` of the
// Trainer's steps, a callback runs `chunk` steps of the loop. So both run in the same process
// state, side by side, and what drifts over a round (the clock, the other
// tenants of a shared machine) falls on both alike. Seconds in each, from
// the Trainer's train start to its end (its loop, not its set-up).
std::pair<double, double> interleaved(const std::shared_ptr<lt::TensorDataset>& ds, int64_t batch_size, int64_t steps,
                                      int64_t chunk, bool fused, lt::NonFinitePolicy on_nonfinite) {
  HandWritten loop(*ds, batch_size, fused);
  auto model = seeded_mlp();
  auto loader = std::make_shared<lt::DataLoader>(ds, lt::DataLoaderOptions(batch_size).shuffle(true));
  double in_trainer = 0, in_loop = 0;
  int64_t step = 0;
  auto mark = std::chrono::steady_clock::now();
  auto alternate = std::make_shared<lt::LambdaCallback>();
  alternate->on_train_start_fn = [&](lt::Trainer&, lt::LightningModule&) { mark = std::chrono::steady_clock::now(); };
  alternate->on_train_batch_end_fn = [&](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const lt::Batch&,
                                         int64_t) {
    if (++step % chunk != 0) return;
    in_trainer += seconds_since(mark);
    const auto t0 = std::chrono::steady_clock::now();
    loop.run(chunk);
    in_loop += seconds_since(t0);
    mark = std::chrono::steady_clock::now();
  };
  alternate->on_train_end_fn = [&](lt::Trainer&, lt::LightningModule&) {  // the steps since the last switch
    in_trainer += seconds_since(mark);
    const auto t0 = std::chrono::steady_clock::now();
    loop.run(step % chunk);
    in_loop += seconds_since(t0);
  };
  lt::Trainer trainer(lt::TrainerOptions()
                          .max_steps(steps)
                          .on_nonfinite(on_nonfinite)
                          .default_logger(false)
                          .enable_progress_bar(false)
                          .enable_model_summary(false)
                          .callbacks({alternate}));
  trainer.fit(model, loader);
  return {in_trainer, in_loop};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The paired ratios' spread: "median (min-max)".
std::string spread(const std::vector<double>& num, const std::vector<double>& den) {
  std::vector<double> r;
  for (size_t i = 0; i < num.size(); ++i) r.push_back(num[i] / den[i]);
  std::sort(r.begin(), r.end());
  char text[64];
  std::snprintf(text, sizeof text, "paired rounds %.4f (%.4f-%.4f)", r[r.size() / 2], r.front(), r.back());
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  int64_t steps = 2000, repeats = 7, batch_size = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::stoll(argv[i + 1]);
  }
  bool real = false;
  auto ds = data(steps * batch_size, &real);
  HandWritten(*ds, batch_size, /*fused=*/false).run(steps / 4);  // warm-up: allocator, thread pool
  // Each round: the Trainer interleaved with the loop as a user writes it,
  // with the loop stepping as the Trainer does, and that again without the
  // Trainer's non-finite check; then the Trainer alone in 32-true and bf16-mixed.
  struct Pair {
    std::vector<double> trainer, loop;
  };
  Pair user, same, unchecked;
  std::vector<double> full, bf16;
  for (int64_t r = 0; r < repeats; ++r) {  // alternate, so drift hits all alike
    for (auto [pair, fused, policy] : {std::tuple{&user, false, lt::NonFinitePolicy::kError},
                                       std::tuple{&same, true, lt::NonFinitePolicy::kError},
                                       std::tuple{&unchecked, true, lt::NonFinitePolicy::kIgnore}}) {
      const auto [in_trainer, in_loop] = interleaved(ds, batch_size, steps, kChunk, fused, policy);
      pair->trainer.push_back(in_trainer);
      pair->loop.push_back(in_loop);
    }
    full.push_back(with_trainer(ds, batch_size, steps));
    bf16.push_back(with_trainer(ds, batch_size, steps, "bf16-mixed"));
  }
  const double b = median(user.loop), f = median(same.loop), t = median(user.trainer);
  std::printf("machine: %s\n", lt::bench::machine().c_str());
  std::printf("parity: MLP 784-256-256-10, Adam, batch %lld, %lld steps, %s data, median of %lld rounds; in each, "
              "the Trainer's train loop interleaved with the hand-written loop every %lld steps\n",
              static_cast<long long>(batch_size), static_cast<long long>(steps), real ? "Fashion-MNIST" : "random",
              static_cast<long long>(repeats), static_cast<long long>(kChunk));
  std::printf("  hand-written loop : %.3f s (%.1f steps/s)\n", b, steps / b);
  std::printf("  the same with lt::step_optimizer: %.3f s (%.1f steps/s)\n", f, steps / f);
  std::printf("  lt::Trainer       : %.3f s (%.1f steps/s)\n", t, steps / t);
  std::printf("  ratio trainer/hand-written = %.4f (target <= 1.03); %s\n", t / b,
              spread(user.trainer, user.loop).c_str());
  std::printf("  ratio trainer/hand-written with the same step (the Trainer's own cost) = %.4f; %s\n",
              median(same.trainer) / f, spread(same.trainer, same.loop).c_str());
  std::printf("  the same with on_nonfinite: ignore (no finiteness check) = %.4f; %s\n",
              median(unchecked.trainer) / median(unchecked.loop), spread(unchecked.trainer, unchecked.loop).c_str());
  const double h = median(bf16), w = median(full);
  std::printf("  lt::Trainer's fit (set-up included), bf16-mixed: %.3f s (%.1f steps/s): %.2fx the steps/s of 32-true "
              "(%.3f s)\n",
              h, steps / h, w / h, w);
  const double flops_per_step = lt::bench::mlp_step_flops(batch_size, {784, 256, 256, 10});
  const double limit = lt::bench::sgemm_gflops();
  std::printf("  step: %.1f GFLOP/s hand-written, %.1f Trainer; sgemm here %.1f GFLOP/s (%d threads): %.0f%% and "
              "%.0f%% of it\n",
              flops_per_step * steps / b / 1e9, flops_per_step * steps / t / 1e9, limit, torch::get_num_threads(),
              100.0 * flops_per_step * steps / b / 1e9 / limit, 100.0 * flops_per_step * steps / t / 1e9 / limit);
  return 0;
}
