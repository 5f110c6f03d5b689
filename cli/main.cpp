// lightning-cpp: train, validate, test or predict from YAML configs.
//   lightning-cpp fit --config configs/fashion_mnist_mlp.yaml --trainer.max_epochs=3
// The built-ins and the Fashion-MNIST example are registered here, the one
// place a program adds to the registry before reading its configs.
#include "cli/cli.h"
#include "trainer/registry.h"
#ifdef LT_WITH_FASHION_MNIST
#include "examples/fashion_mnist/registration.h"
#endif

int main(int argc, char** argv) {
  lt::Registry& registry = lt::Registry::global();
#ifdef LT_WITH_FASHION_MNIST
  lt::examples::register_fashion_mnist(registry);
#endif
  return lt::cli::main(argc, argv, registry);
}
