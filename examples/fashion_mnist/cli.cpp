// fashion_mnist_cli: the lightning-cpp command with the Fashion-MNIST models
// and data module registered, as a user's own program would have it (in the
// way a LightningCLI script names its own modules).
//   fashion_mnist_cli fit --config configs/fashion_mnist_mlp.yaml --trainer.max_epochs=3
#include <lightning_cpp/cli/cli.h>
#include <lightning_cpp/core/registry.h>

#include "fashion_mnist/registration.h"

int main(int argc, char** argv) {
  lt::Registry& registry = lt::Registry::global();
  lt::examples::register_fashion_mnist(registry);
  return lt::cli::main(argc, argv, registry);
}
