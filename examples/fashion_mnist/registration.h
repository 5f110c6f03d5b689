#pragma once
// Adds the Fashion-MNIST example (MlpClassifier, CnnClassifier,
// FashionMnistDataModule) to a registry, for configs to name.

namespace lt {
class Registry;
}

namespace lt::examples {
void register_fashion_mnist(Registry& registry);
}  // namespace lt::examples
