#pragma once
// Fashion-MNIST from IDX files (gzip-compressed or not), as Debian's
// dataset-fashion-mnist installs them under /usr/share/datasets/fashion-mnist.

#include <string>

#include <torch/torch.h>

#include <lightning_cpp/data/dataset.h>

namespace lt {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Reads an IDX file (magic 0x0801 labels or 0x0803 images, big-endian
// dimensions) into a uint8 tensor. Throws lt::ValueError naming the file on a
// missing, truncated or malformed file.
torch::Tensor read_idx_file(const std::string& path);

struct FashionMnistSplit {
  torch::Tensor images;  // float32 [N, 1, 28, 28], scaled to [0, 1] and normalized
  torch::Tensor labels;  // int64 [N], in [0, 9]
};

// train=true: the 60000 training examples; false: the 10000 test examples.
FashionMnistSplit load_fashion_mnist(const std::string& dir, bool train);

}  // namespace lt
