#include <lightning_cpp/data/sampler.h>

#include <numeric>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <lightning_cpp/core/check.h>

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

PaddedSampler::PaddedSampler(std::shared_ptr<Sampler> inner, int64_t num_samples)
    : inner_(std::move(inner)), num_samples_(num_samples) {
  LT_CHECK(inner_ != nullptr, "PaddedSampler: the sampler is null");
}

std::vector<int64_t> PaddedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> out = inner_->indices(epoch);
  const size_t own = out.size();
  LT_CHECK_VALUE(own > 0 || num_samples_ == 0, "uneven_inputs: pad: this rank has no samples to repeat (its ",
                 "sampler gave none for epoch ", epoch, "); use uneven_inputs: join");
  for (size_t i = 0; static_cast<int64_t>(out.size()) < num_samples_; ++i) out.push_back(out[i % own]);
  return out;
}

RemainderSampler::RemainderSampler(std::shared_ptr<Sampler> inner, int64_t epoch,
                                   const std::vector<int64_t>& remaining, int64_t rank, int64_t world_size, bool pad,
                                   std::vector<uint8_t> trained)
    : inner_(std::move(inner)), epoch_(epoch), trained_(std::move(trained)) {
  LT_CHECK(inner_ != nullptr && world_size > 0 && rank >= 0 && rank < world_size, "RemainderSampler: rank ", rank,
           " of ", world_size);
  for (size_t i = static_cast<size_t>(rank); i < remaining.size(); i += static_cast<size_t>(world_size)) {
    mine_.push_back(remaining[i]);
  }
  const size_t longest = (remaining.size() + static_cast<size_t>(world_size) - 1) / static_cast<size_t>(world_size);
  const size_t own = mine_.size();
  for (size_t i = 0; pad && own > 0 && mine_.size() < longest; ++i) mine_.push_back(mine_[i % own]);
}

std::vector<int64_t> RemainderSampler::indices(int64_t epoch) const {
  return epoch == epoch_ ? mine_ : inner_->indices(epoch);
}

}  // namespace lt
