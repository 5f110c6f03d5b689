#pragma once
// SyncBatchNorm: batch normalization whose training statistics are those of
// the union of every rank's batch (PyTorch's nn.SyncBatchNorm; Lightning's
// sync_batchnorm=True). LibTorch's C++ API has none.
//
// C++ modules call their layers through the members that hold them, so a
// Trainer cannot swap BatchNorm layers for synced ones as Lightning does:
// declare lt::SyncBatchNorm in the model. Without a process group (one
// process, or before the DDP strategy's setup) it is a plain BatchNorm.
//
// Per training forward, on the strategy's layer-sync process group (its own
// group, so that these blocking collectives never interleave with DDP's
// asynchronous gradient buckets):
//   forward : allgather of [layer index, count, mean (C), M2 (C)] — the
//             global mean and biased variance combine the ranks' counts
//             (Chan's parallel formula); running stats take the unbiased one;
//   backward: allreduce SUM of [sum dy (C), sum dy*(x-mean) (C), layer index];
//             grad_input uses the global sums over the global count; the
//             affine gradients stay local (DDP averages them).
// Under Join, a rank with no micro-batch in an iteration shadows them
// (CollectiveLayer, core/collective_layer.h): count 0 and zero sums, so the
// statistics are the active ranks' and the running stats still advance alike
// on every rank. A mismatch in the order of the layers is detected through
// the layer index each collective carries.

#include <cstdint>

#include <torch/torch.h>

#include <lightning_cpp/core/collective_layer.h>

namespace lt {

class SyncBatchNormImpl : public torch::nn::NormImplBase<1, SyncBatchNormImpl, torch::nn::BatchNormOptions>,
                          public CollectiveLayer {
 public:
  explicit SyncBatchNormImpl(int64_t num_features) : SyncBatchNormImpl(torch::nn::BatchNormOptions(num_features)) {}
  explicit SyncBatchNormImpl(const torch::nn::BatchNormOptions& options) : NormImplBase(options) {}

  torch::Tensor forward(const torch::Tensor& input);

  // Set by the DDP strategy. Null: a plain BatchNorm.
  void set_process_group(c10::intrusive_ptr<c10d::ProcessGroup> process_group, int64_t layer_index) override;
  const c10::intrusive_ptr<c10d::ProcessGroup>& process_group() const { return process_group_; }

  // A training iteration's collectives with no input of this rank's (Join).
  void shadow_forward() override;
  void shadow_backward() override;

  void pretty_print(std::ostream& stream) const override;
  // The dtype and device of the statistics exchanged (every rank's alike: the layer's own).
  torch::TensorOptions stats_options() const;

 protected:
  void _check_input_dim(const torch::Tensor& input) override;

 private:
  // Global mean and biased variance from every rank's [index, count, mean, M2]; updates the running stats.
  std::pair<torch::Tensor, torch::Tensor> gather_statistics(const torch::Tensor& local, int64_t* total);
  void update_running_stats(const torch::Tensor& mean, const torch::Tensor& var, int64_t total);
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  int64_t layer_index_ = 0;
  int64_t last_active_ = 0;  // ranks with an input in the last forward (the backward's check)
};

TORCH_MODULE(SyncBatchNorm);

}  // namespace lt
