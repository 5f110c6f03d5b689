// The Fashion-MNIST example's work (examples/fashion_mnist: the MLP
// 784-256-256-10, Adam 1e-3, batches of 64, 55000/5000 split, validation
// each epoch, then the test set) through lt::Trainer on a device and a
// precision, timed from the first training batch to the end of fit.
// bench/gpu/compare.py runs it beside the same work as the strictest plain
// PyTorch loop and as a Lightning 2.6 Trainer (fashion_mnist_torch.py).
//   example_gpu [--accelerator cuda] [--precision 32-true] [--epochs 3] [--data DIR]
// Prints one line: "steps/s <rate> train_s <seconds> accuracy <test accuracy>".

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <lightning_cpp/lightning.h>

#include "fashion_mnist/fashion_mnist.h"

int main(int argc, char** argv) {
  std::string accelerator = "cuda", precision = "32-true", data_dir = lt::kFashionMnistDir;
  int64_t epochs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--accelerator") accelerator = value;
    else if (key == "--precision") precision = value;
    else if (key == "--epochs") epochs = std::stoll(value);
    else if (key == "--data") data_dir = value;
    else {
      std::cerr << "example_gpu: unknown option " << key << "\n";
      return 2;
    }
  }
  auto synchronize = [&] {
    if (accelerator == "cuda") torch::cuda::synchronize();
  };
  torch::manual_seed(0);
  auto model = std::make_shared<lt::examples::MlpClassifier>();
  auto data = std::make_shared<lt::examples::FashionMnistDataModule>(
      lt::examples::FashionMnistDataOptions().data_dir(data_dir));
  std::chrono::steady_clock::time_point start;
  auto timer = std::make_shared<lt::LambdaCallback>();
  timer->on_train_batch_start_fn = [&](lt::Trainer& trainer, lt::LightningModule&, const lt::Batch&, int64_t) {
    if (trainer.global_step() != 0) return;
    synchronize();
    start = std::chrono::steady_clock::now();
  };
  lt::Trainer trainer(lt::TrainerOptions()
                          .accelerator(accelerator)
                          .precision(precision)
                          .max_epochs(epochs)
                          .seed(0)
                          .enable_progress_bar(false)
                          .enable_model_summary(false)
                          .default_logger(false)
                          .callbacks({timer}));
  trainer.fit(model, data);
  synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto metrics = trainer.test(model, data);
  std::printf("steps/s %.1f train_s %.3f accuracy %.4f\n", trainer.global_step() / seconds, seconds,
              metrics["test_acc"]);
  return 0;
}
