#include <lightning_cpp/data/sampler.h>

#include <numeric>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

namespace lt {

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto perm = torch::randperm(n, gen, torch::kLong);
  const int64_t* p = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> out(static_cast<size_t>(size_));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return seeded_permutation(size_, seed_ + static_cast<uint64_t>(epoch));
}

}  // namespace lt
