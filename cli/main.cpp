// lightning-cpp: train, validate, test or predict from YAML configs.
//   lightning-cpp fit --config run.yaml --plugin libmine.so --trainer.max_epochs=3
// Knows the built-ins only; models and data come from plugins (`plugins:` in a
// config, or --plugin). A program with its own models calls lt::cli::main
// with a registry it added them to (examples/fashion_mnist/cli.cpp).
#include <lightning_cpp/cli/cli.h>
#include <lightning_cpp/core/registry.h>

int main(int argc, char** argv) { return lt::cli::main(argc, argv, lt::Registry::global()); }
