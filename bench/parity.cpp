// bench/parity: the Trainer against a hand-written LibTorch loop on the same
// MLP, the same data and the same number of steps, in the same process.
// Prints the wall time of each (median of alternating repeats) and the ratio.
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
#include <vector>

#include <lightning_cpp/core/fused_optimizer.h>
#include <lightning_cpp/data/fashion_mnist.h>
#include <lightning_cpp/trainer/trainer.h>

#include "machine_limit.h"

namespace {

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

// fused: the step as the Trainer takes it (lt::step_optimizer), so the ratio
// is what the Trainer's machinery costs; else optimizer.step(), as a user writes.
double hand_written(const lt::TensorDataset& ds, int64_t batch_size, int64_t steps, bool fused = false) {
  torch::manual_seed(0);
  Mlp model;
  torch::optim::Adam optimizer(model.parameters(), torch::optim::AdamOptions(1e-3));
  lt::DataLoader loader(std::make_shared<lt::TensorDataset>(ds), lt::DataLoaderOptions(batch_size).shuffle(true));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t batch_idx = i % loader.size();
    if (batch_idx == 0) loader.set_epoch(i / loader.size());  // epochs, as the Trainer's
    auto batch = loader.get(batch_idx);
    auto loss = torch::cross_entropy_loss(model.forward(batch.data), batch.target);
    loss.backward();
    if (fused) lt::step_optimizer(optimizer);
    else optimizer.step();
    optimizer.zero_grad();
  }
  return seconds_since(t0);
}

double with_trainer(const std::shared_ptr<lt::TensorDataset>& ds, int64_t batch_size, int64_t steps,
                    const std::string& precision = "32-true",
                    lt::NonFinitePolicy on_nonfinite = lt::NonFinitePolicy::kError) {
  torch::manual_seed(0);
  auto model = std::make_shared<Mlp>();
  auto loader = std::make_shared<lt::DataLoader>(ds, lt::DataLoaderOptions(batch_size).shuffle(true));
  // No logger, summary or bar: the hand-written loop has none (Lightning's own benchmarks run so too).
  lt::Trainer trainer(lt::TrainerOptions().max_steps(steps).precision(precision).on_nonfinite(on_nonfinite)
                          .default_logger(false)
                          .enable_progress_bar(false).enable_model_summary(false));
  const auto t0 = std::chrono::steady_clock::now();
  trainer.fit(model, loader);
  return seconds_since(t0);
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
  hand_written(*ds, batch_size, steps / 4);  // warm-up: allocator, thread pool
  std::vector<double> base, fused, trainer, unchecked, bf16;
  for (int64_t r = 0; r < repeats; ++r) {  // alternate, so drift hits all alike
    base.push_back(hand_written(*ds, batch_size, steps));
    fused.push_back(hand_written(*ds, batch_size, steps, /*fused=*/true));
    trainer.push_back(with_trainer(ds, batch_size, steps));
    unchecked.push_back(with_trainer(ds, batch_size, steps, "32-true", lt::NonFinitePolicy::kIgnore));
    bf16.push_back(with_trainer(ds, batch_size, steps, "bf16-mixed"));
  }
  const double b = median(base), f = median(fused), t = median(trainer), u = median(unchecked), h = median(bf16);
  std::printf("machine: %s\n", lt::bench::machine().c_str());
  std::printf("parity: MLP 784-256-256-10, Adam, batch %lld, %lld steps, %s data, median of %lld\n",
              static_cast<long long>(batch_size), static_cast<long long>(steps), real ? "Fashion-MNIST" : "random",
              static_cast<long long>(repeats));
  std::printf("  hand-written loop : %.3f s (%.1f steps/s)\n", b, steps / b);
  std::printf("  the same with lt::step_optimizer: %.3f s (%.1f steps/s)\n", f, steps / f);
  std::printf("  lt::Trainer       : %.3f s (%.1f steps/s)\n", t, steps / t);
  std::printf("  ratio trainer/hand-written = %.4f (target <= 1.03); %s\n", t / b, spread(trainer, base).c_str());
  std::printf("  ratio trainer/hand-written with the same step (the Trainer's own cost) = %.4f; %s\n", t / f,
              spread(trainer, fused).c_str());
  std::printf("  the same with on_nonfinite: ignore (no finiteness check) = %.4f; %s\n", u / f,
              spread(unchecked, fused).c_str());
  std::printf("  lt::Trainer bf16-mixed: %.3f s (%.1f steps/s): %.2fx the steps/s of 32-true\n", h, steps / h, t / h);
  const double flops_per_step = lt::bench::mlp_step_flops(batch_size, {784, 256, 256, 10});
  const double limit = lt::bench::sgemm_gflops();
  std::printf("  step: %.1f GFLOP/s hand-written, %.1f Trainer; sgemm here %.1f GFLOP/s (%d threads): %.0f%% and "
              "%.0f%% of it\n",
              flops_per_step * steps / b / 1e9, flops_per_step * steps / t / 1e9, limit, torch::get_num_threads(),
              100.0 * flops_per_step * steps / b / 1e9 / limit, 100.0 * flops_per_step * steps / t / 1e9 / limit);
  return 0;
}
