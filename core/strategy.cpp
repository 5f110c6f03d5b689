#include <lightning_cpp/core/strategy.h>

#include <lightning_cpp/core/check.h>

#include <lightning_cpp/core/lightning_module.h>

namespace lt {

void Strategy::setup(LightningModule& module) { module.to(root_device()); }

void Strategy::set_precision(std::shared_ptr<Precision> precision) {
  LT_CHECK(precision != nullptr, "Strategy::set_precision: null");
  precision_ = std::move(precision);
}

Batch Strategy::batch_to_device(Batch batch) const {
  const torch::Device device = root_device();
  return batch.map([&](const torch::Tensor& t) { return t.to(device); });
}

torch::Tensor Strategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  return module.training_step(batch, batch_idx);
}

void Strategy::backward(const torch::Tensor& loss, LightningModule& /*module*/) { loss.backward(); }

void Strategy::optimizer_step(torch::optim::Optimizer& optimizer) { optimizer.step(); }

std::unique_ptr<TrainingEpochContext> Strategy::training_epoch_context(LightningModule& /*module*/,
                                                                       const EpochPlan& plan) {
  return std::make_unique<TrainingEpochContext>(plan);
}

torch::Tensor zero_loss(const torch::nn::Module& module, torch::Device device) {
  torch::Tensor zero = torch::zeros({}, device);
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) zero = zero + (p * 0).sum();
  }
  return zero;
}

torch::Tensor Strategy::reduce(const torch::Tensor& tensor, ReduceOp /*op*/) { return tensor; }

torch::Tensor Strategy::all_gather(const torch::Tensor& tensor) { return tensor.unsqueeze(0); }

std::vector<std::string> Strategy::all_gather_bytes(const std::string& bytes) { return {bytes}; }

torch::Tensor Strategy::broadcast(const torch::Tensor& tensor, int64_t /*src*/) { return tensor; }

bool Strategy::reduce_boolean_decision(bool decision, bool /*all*/) { return decision; }

std::pair<int64_t, int64_t> count_range(Strategy& strategy, int64_t local) {
  const torch::Tensor extremes = strategy.reduce(torch::tensor({local, -local}, torch::kLong), ReduceOp::kMax);
  return {-extremes[1].item<int64_t>(), extremes[0].item<int64_t>()};
}

std::string uneven_counts(Strategy& strategy, int64_t local) {
  const auto [shortest, longest] = count_range(strategy, local);
  if (shortest == longest && shortest >= 0) return {};
  // Every rank learned the same: all gather the counts to name them.
  const torch::Tensor counts = strategy.all_gather(torch::tensor({local}, torch::kLong)).flatten();
  std::string listing;
  for (int64_t r = 0; r < counts.size(0); ++r) {
    const int64_t count = counts[r].item<int64_t>();
    listing +=
        c10::str(r == 0 ? "" : ", ", "rank ", r, ": ", count >= 0 ? std::to_string(count) : "unknown (a stream)");
  }
  return listing;
}

}  // namespace lt
