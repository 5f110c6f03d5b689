#include <lightning_cpp/data/fashion_mnist.h>

#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  {
    std::ifstream probe(path, std::ios::binary);
    LT_CHECK_VALUE(probe.good(), "IDX file '", path,
                   "' not found; install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
                   "or pass the folder that holds the *-idx?-ubyte.gz files");
  }
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are, too
  LT_CHECK_VALUE(f != nullptr, "cannot open IDX file '", path, "'");
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  while (true) {
    const int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    int errnum = Z_OK;
    const char* msg = gzerror(f, &errnum);
    // A stream cut short reads as end-of-file with Z_BUF_ERROR set.
    if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
      const std::string text = msg;
      gzclose(f);
      throw ValueError(c10::str("IDX file '", path, "' is corrupt (gzip: ", text, ")"));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(f);
  return out;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

torch::Tensor read_idx_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_maybe_gzip(path);
  LT_CHECK_VALUE(bytes.size() >= 4, "IDX file '", path, "' is truncated: ", bytes.size(), " bytes, no header");
  LT_CHECK_VALUE(bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08, "IDX file '", path,
                 "' has a bad magic number (expected 0x0000 08xx for unsigned bytes)");
  const int ndim = bytes[3];
  LT_CHECK_VALUE(ndim >= 1 && ndim <= 4, "IDX file '", path, "' has ", ndim, " dimensions; expected 1 to 4");
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  LT_CHECK_VALUE(bytes.size() >= header, "IDX file '", path, "' is truncated inside its header");
  std::vector<int64_t> sizes;
  size_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    sizes.push_back(big_endian_u32(&bytes[4 + 4 * d]));
    count *= static_cast<size_t>(sizes.back());
  }
  LT_CHECK_VALUE(bytes.size() - header == count, "IDX file '", path, "' is truncated or has trailing data: header says ",
                 count, " bytes of data, file has ", bytes.size() - header);
  auto out = torch::empty(sizes, torch::kUInt8);
  std::memcpy(out.data_ptr<uint8_t>(), bytes.data() + header, count);
  return out;
}

FashionMnistSplit load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = dir + (train ? "/train" : "/t10k");
  torch::Tensor images = read_idx_file(prefix + "-images-idx3-ubyte.gz");
  torch::Tensor labels = read_idx_file(prefix + "-labels-idx1-ubyte.gz");
  LT_CHECK_VALUE(images.dim() == 3 && images.size(1) == 28 && images.size(2) == 28, "Fashion-MNIST images in '", dir,
                 "' have shape ", images.sizes(), "; expected [N, 28, 28]");
  LT_CHECK_VALUE(labels.dim() == 1 && labels.size(0) == images.size(0), "Fashion-MNIST in '", dir, "': ",
                 images.size(0), " images but labels of shape ", labels.sizes());
  // Mean/std of the Fashion-MNIST training images.
  constexpr double kMean = 0.2860, kStd = 0.3530;
  FashionMnistSplit split;
  split.images = ((images.to(torch::kFloat32) / 255.0 - kMean) / kStd).unsqueeze(1);
  split.labels = labels.to(torch::kInt64);
  LT_CHECK_VALUE(split.labels.max().item<int64_t>() <= 9, "Fashion-MNIST labels in '", dir, "' exceed 9");
  return split;
}

}  // namespace lt
