#include <lightning_cpp/data/fashion_mnist.h>

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

// A gzip stream (or a plain file: gzread passes it through), read in pieces
// straight into the caller's memory.
class IdxReader {
 public:
  explicit IdxReader(const std::string& path) : path_(path) {
    {
      std::ifstream probe(path, std::ios::binary);
      LT_CHECK_VALUE(probe.good(), "IDX file '", path,
                     "' not found; install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
                     "or pass the folder that holds the *-idx?-ubyte.gz files");
    }
    file_ = gzopen(path.c_str(), "rb");
    LT_CHECK_VALUE(file_ != nullptr, "cannot open IDX file '", path, "'");
  }
  ~IdxReader() { gzclose(file_); }
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  // Reads up to `size` bytes into `out`; fewer only at the end of the data.
  size_t read(uint8_t* out, size_t size) {
    size_t done = 0;
    while (done < size) {
      const unsigned piece = static_cast<unsigned>(std::min<size_t>(size - done, size_t{1} << 24));
      const int n = gzread(file_, out + done, piece);
      int errnum = Z_OK;
      const char* msg = gzerror(file_, &errnum);
      // A stream cut short reads as end-of-file with Z_BUF_ERROR set.
      if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
        throw ValueError(c10::str("IDX file '", path_, "' is corrupt (gzip: ", msg, ")"));
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  // Counts (and drops) whatever is left.
  size_t skip_rest() {
    std::vector<uint8_t> chunk(1 << 16);
    size_t total = 0;
    for (size_t n; (n = read(chunk.data(), chunk.size())) > 0;) total += n;
    return total;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// Deflate expands at most 1032 to 1: a header announcing more data than that
// is a lie, found out before anything is allocated for it.
constexpr uint64_t kMaxDeflateRatio = 1032;

}  // namespace

torch::Tensor read_idx_file(const std::string& path) {
  IdxReader reader(path);
  uint8_t header[4 + 4 * 4];
  const size_t magic = reader.read(header, 4);
  LT_CHECK_VALUE(magic == 4, "IDX file '", path, "' is truncated: ", magic, " bytes, no header");
  LT_CHECK_VALUE(header[0] == 0 && header[1] == 0 && header[2] == 0x08, "IDX file '", path,
                 "' has a bad magic number (expected 0x0000 08xx for unsigned bytes)");
  const int ndim = header[3];
  LT_CHECK_VALUE(ndim >= 1 && ndim <= 4, "IDX file '", path, "' has ", ndim, " dimensions; expected 1 to 4");
  LT_CHECK_VALUE(reader.read(header + 4, 4 * static_cast<size_t>(ndim)) == 4 * static_cast<size_t>(ndim),
                 "IDX file '", path, "' is truncated inside its header");
  std::vector<int64_t> sizes;
  uint64_t count = 1;
  const uint64_t file_size = std::filesystem::file_size(path), most = kMaxDeflateRatio * file_size;
  for (int d = 0; d < ndim; ++d) {
    sizes.push_back(big_endian_u32(&header[4 + 4 * d]));
    const auto size = static_cast<uint64_t>(sizes.back());
    // Checked before multiplying: the product of four 32-bit sizes overflows 64 bits.
    LT_CHECK_VALUE(size == 0 || count <= most / size, "IDX file '", path,
                   "' is truncated: its header announces dimensions ", c10::IntArrayRef(sizes),
                   "..., more data than a file of ", file_size, " bytes can hold");
    count *= size;
  }
  auto out = torch::empty(sizes, torch::kUInt8);
  const size_t got = reader.read(out.data_ptr<uint8_t>(), count);
  const size_t extra = got == count ? reader.skip_rest() : 0;
  LT_CHECK_VALUE(got == count && extra == 0, "IDX file '", path,
                 "' is truncated or has trailing data: header says ", count, " bytes of data, file has ", got + extra);
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
  // In place: the same values as ((x / 255 - mean) / std), with one float copy of the images alive, not four.
  split.images = images.to(torch::kFloat32).div_(255.0).sub_(kMean).div_(kStd).unsqueeze(1);
  split.labels = labels.to(torch::kInt64);
  LT_CHECK_VALUE(split.labels.max().item<int64_t>() <= 9, "Fashion-MNIST labels in '", dir, "' exceed 9");
  return split;
}

}  // namespace lt
