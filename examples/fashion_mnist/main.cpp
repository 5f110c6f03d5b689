// Fashion-MNIST with lightning-cpp: trains the MLP (or, with --cnn, the CNN)
// and prints the test accuracy.
//   fashion_mnist [--cnn] [--epochs N] [--data DIR]

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "examples/fashion_mnist/fashion_mnist.h"
#include "trainer/check.h"
#include "trainer/trainer.h"

int main(int argc, char** argv) {
  bool cnn = false;
  int64_t epochs = 3;
  std::string data_dir = lt::kFashionMnistDir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cnn")) cnn = true;
    else if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--data") && i + 1 < argc) data_dir = argv[++i];
    else {
      std::cerr << "usage: fashion_mnist [--cnn] [--epochs N] [--data DIR]\n";
      return 2;
    }
  }
  try {
    torch::manual_seed(0);
    std::shared_ptr<lt::LightningModule> model;
    if (cnn) model = std::make_shared<lt::examples::CnnClassifier>();
    else model = std::make_shared<lt::examples::MlpClassifier>();
    auto data = std::make_shared<lt::examples::FashionMnistDataModule>(
        lt::examples::FashionMnistDataOptions().data_dir(data_dir));
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(epochs).seed(0));
    trainer.fit(model, data);
    auto metrics = trainer.test(model, data);
    std::printf("%s test accuracy: %.4f (test loss %.4f)\n", cnn ? "CNN" : "MLP", metrics["test_acc"],
                metrics["test_loss"]);
  } catch (const lt::ValueError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
