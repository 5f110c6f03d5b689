// Fashion-MNIST with lightning-cpp: trains the MLP (or, with --cnn, the CNN)
// and prints the test accuracy.
//   fashion_mnist [--cnn] [--epochs N] [--data DIR] [--devices N] [--num-workers N] [--no-logger]
// --devices N > 1 trains with the ddp strategy: this process launches N
// worker processes of itself and exits when they are done (see plugins/strategies/ddp/ddp.h).
// --num-workers N: loader worker threads gather the next training batches
// while the loop trains; --no-logger: no CSV and TensorBoard files (both for
// bench/example's measurements of what overlapping them would gain).

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/logger_collection.h>
#include <lightning_cpp/loggers/tensorboard.h>
#include <lightning_cpp/plugins/launchers/error_file.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "fashion_mnist/fashion_mnist.h"

int main(int argc, char** argv) {
  bool cnn = false;
  int64_t epochs = 3;
  int64_t devices = 1;
  int64_t num_workers = 0;
  bool log = true;
  std::string data_dir = lt::kFashionMnistDir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cnn")) cnn = true;
    else if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) data_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--devices") && i + 1 < argc) devices = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--num-workers") && i + 1 < argc) num_workers = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-logger")) log = false;
    else {
      std::cerr << "usage: fashion_mnist [--cnn] [--epochs N] [--data DIR] [--devices N] [--num-workers N] "
                   "[--no-logger]\n";
      return 2;
    }
  }
  try {
    torch::manual_seed(0);
    std::shared_ptr<lt::LightningModule> model;
    if (cnn) model = std::make_shared<lt::examples::CnnClassifier>();
    else model = std::make_shared<lt::examples::MlpClassifier>();
    auto data = std::make_shared<lt::examples::FashionMnistDataModule>(
        lt::examples::FashionMnistDataOptions().data_dir(data_dir).num_workers(num_workers));
    // Lightning's default loggers: TensorBoard event files and metrics.csv in lightning_logs/version_N.
    auto loggers = std::make_shared<lt::LoggerCollection>(std::vector<std::shared_ptr<lt::Logger>>{
        std::make_shared<lt::CSVLogger>(), std::make_shared<lt::TensorBoardLogger>()});
    auto options = lt::TrainerOptions().max_epochs(epochs).seed(0);
    if (log) options.logger(loggers);
    else options.default_logger(false);
    if (devices > 1) options.devices(devices).strategy(std::make_shared<lt::DDPStrategy>());
    lt::Trainer trainer(options);
    trainer.fit(model, data);
    auto metrics = trainer.test(model, data);  // sync_dist: the same on every rank
    if (trainer.is_global_zero()) {
      std::printf("%s test accuracy: %.4f (test loss %.4f)\n", cnn ? "CNN" : "MLP", metrics["test_acc"],
                  metrics["test_loss"]);
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
