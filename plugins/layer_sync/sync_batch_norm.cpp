#include <lightning_cpp/plugins/layer_sync/sync_batch_norm.h>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

// [1, C, 1, ...] for an input of `dim` dimensions.
std::vector<int64_t> channel_shape(int64_t dim, int64_t channels) {
  std::vector<int64_t> shape(dim, 1);
  shape[1] = channels;
  return shape;
}

// Every dimension but the channels'.
std::vector<int64_t> reduce_dims(int64_t dim) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < dim; ++d) dims.push_back(d);
  return dims;
}

std::vector<torch::Tensor> allgather(c10d::ProcessGroup& pg, const torch::Tensor& local) {
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < pg.getSize(); ++r) out[0].push_back(torch::empty_like(local));
  std::vector<torch::Tensor> in{local};
  pg.allgather(out, in)->wait();
  return out[0];
}

torch::Tensor allreduce_sum(c10d::ProcessGroup& pg, torch::Tensor t) {
  std::vector<torch::Tensor> tensors{std::move(t)};
  pg.allreduce(tensors)->wait();
  return tensors[0];
}

// The backward's global sums: [sum dy (C), sum dy*(x-mean) (C), index + 1 per active rank].
torch::Tensor reduce_backward_sums(c10d::ProcessGroup& pg, const torch::Tensor& local, int64_t layer_index,
                                   int64_t active_ranks) {
  torch::Tensor global = allreduce_sum(pg, local);
  const int64_t check = global[-1].item<int64_t>();
  LT_CHECK(check == active_ranks * (layer_index + 1), "SyncBatchNorm (layer ", layer_index,
           "): the ranks' backward passes reached their SyncBatchNorm layers in different orders; run them in the "
           "order the model registers them");
  return global;
}

struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& mean,
                               const torch::Tensor& invstd, int64_t total, int64_t active_ranks,
                               SyncBatchNormImpl* layer, int64_t layer_index) {
    const auto shape = channel_shape(input.dim(), mean.size(0));
    torch::Tensor out = (input - mean.view(shape)) * invstd.view(shape);
    if (weight.defined()) out = out * weight.view(shape) + bias.view(shape);
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["total"] = total;
    ctx->saved_data["active_ranks"] = active_ranks;
    // The backward needs the layer's process group: saved_data holds IValues
    // only, so the layer goes as its address (it outlives its forward's graph).
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["layer_index"] = layer_index;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const torch::Tensor dy = grad_outputs[0].contiguous();
    auto* layer = reinterpret_cast<SyncBatchNormImpl*>(ctx->saved_data["layer"].toInt());
    const int64_t index = ctx->saved_data["layer_index"].toInt();
    const auto shape = channel_shape(input.dim(), mean.size(0));
    const auto dims = reduce_dims(input.dim());
    const torch::Tensor xmu = input - mean.view(shape);
    const torch::Tensor sum_dy = dy.sum(dims);
    const torch::Tensor sum_dy_xmu = (dy * xmu).sum(dims);
    const torch::Tensor marker = torch::full({1}, static_cast<double>(index + 1), sum_dy.options());
    const torch::Tensor local = torch::cat({sum_dy, sum_dy_xmu, marker}).to(layer->stats_options());
    const torch::Tensor global = reduce_backward_sums(*layer->process_group(), local, index,
                                                      ctx->saved_data["active_ranks"].toInt())
                                     .to(dy.options());
    const int64_t c = mean.size(0);
    const double total = static_cast<double>(ctx->saved_data["total"].toInt());
    const torch::Tensor mean_dy = global.slice(0, 0, c) / total;
    const torch::Tensor mean_dy_xmu = global.slice(0, c, 2 * c) / total;
    torch::Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight;
    const torch::Tensor grad_input =
        (dy - mean_dy.view(shape) - xmu * (invstd * invstd * mean_dy_xmu).view(shape)) * scale.view(shape);
    // The affine parameters' gradients stay local: DDP averages them.
    torch::Tensor grad_weight, grad_bias;
    if (weight.defined()) {
      grad_weight = sum_dy_xmu * invstd;
      grad_bias = sum_dy;
    }
    return {grad_input, grad_weight, grad_bias, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void SyncBatchNormImpl::_check_input_dim(const torch::Tensor& input) {
  LT_CHECK(input.dim() >= 2, "SyncBatchNorm: expected an input of 2 or more dimensions [N, C, ...], got ",
           input.sizes());
  LT_CHECK(input.size(1) == options.num_features(), "SyncBatchNorm: expected ", options.num_features(),
           " channels (dimension 1), got an input of shape ", input.sizes());
}

void SyncBatchNormImpl::set_process_group(c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                                          int64_t layer_index) {
  process_group_ = std::move(process_group);
  layer_index_ = layer_index;
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  _check_input_dim(input);
  const bool synced = is_training() && process_group_ && process_group_->getSize() > 1;
  if (!synced) {
    // BatchNorm, as LibTorch's BatchNormImplBase::forward.
    double factor = options.momentum().value_or(0.0);
    if (is_training() && options.track_running_stats() && num_batches_tracked.defined()) {
      num_batches_tracked += 1;
      factor = options.momentum().value_or(1.0 / num_batches_tracked.item<double>());
    }
    return torch::nn::functional::detail::batch_norm(input, running_mean, running_var, weight, bias,
                                                     is_training() || !options.track_running_stats(), factor,
                                                     options.eps());
  }
  torch::Tensor mean, var;
  int64_t total = 0;
  {
    torch::NoGradGuard no_grad;
    const auto dims = reduce_dims(input.dim());
    const double n = static_cast<double>(input.numel() / input.size(1));
    const torch::Tensor local_mean = input.mean(dims);
    const torch::Tensor m2 = input.var(dims, /*unbiased=*/false) * n;
    const torch::Tensor head = torch::tensor({static_cast<double>(layer_index_ + 1), n}, local_mean.options());
    std::tie(mean, var) = gather_statistics(torch::cat({head, local_mean, m2}).to(stats_options()), &total);
  }
  const torch::Tensor invstd = torch::rsqrt(var + options.eps());
  return SyncBatchNormFunction::apply(input, weight, bias, mean.to(input.scalar_type()),
                                      invstd.to(input.scalar_type()), total, last_active_, this, layer_index_);
}

std::pair<torch::Tensor, torch::Tensor> SyncBatchNormImpl::gather_statistics(const torch::Tensor& local,
                                                                             int64_t* total) {
  const int64_t c = options.num_features();
  double count = 0.0;
  int64_t active = 0;
  std::vector<torch::Tensor> ranks = allgather(*process_group_, local);
  torch::Tensor mean = torch::zeros({c}, torch::kDouble);
  for (auto& r : ranks) {
    r = r.to(torch::kCPU, torch::kDouble);
    const double n = r[1].item<double>();
    if (n == 0.0) continue;  // a rank shadowing this iteration (Join)
    LT_CHECK(r[0].item<double>() == static_cast<double>(layer_index_ + 1), "SyncBatchNorm (layer ", layer_index_,
             "): the ranks' forward passes reached their SyncBatchNorm layers in different orders; run them in the "
             "order the model registers them");
    count += n;
    ++active;
    mean += n * r.slice(0, 2, 2 + c);
  }
  last_active_ = active;
  *total = static_cast<int64_t>(count);
  // Only ranks shadowing: an iteration of padding micro-batches on every rank; nothing to normalize.
  if (count == 0) return {mean, mean};
  mean /= count;
  torch::Tensor m2 = torch::zeros({c}, torch::kDouble);
  for (const auto& r : ranks) {
    const double n = r[1].item<double>();
    if (n == 0.0) continue;
    m2 += r.slice(0, 2 + c, 2 + 2 * c) + n * (r.slice(0, 2, 2 + c) - mean).pow(2);
  }
  const torch::Tensor var = m2 / count;
  update_running_stats(mean, var, *total);
  return {mean.to(local.device()), var.to(local.device())};
}

void SyncBatchNormImpl::update_running_stats(const torch::Tensor& mean, const torch::Tensor& var, int64_t total) {
  if (!options.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  double factor = options.momentum().value_or(0.0);
  if (num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    factor = options.momentum().value_or(1.0 / num_batches_tracked.item<double>());
  }
  const double unbias = total > 1 ? static_cast<double>(total) / static_cast<double>(total - 1) : 1.0;
  running_mean.mul_(1.0 - factor).add_(mean.to(running_mean.options()) * factor);
  running_var.mul_(1.0 - factor).add_(var.to(running_var.options()) * (factor * unbias));
}

torch::TensorOptions SyncBatchNormImpl::stats_options() const {
  if (weight.defined()) return weight.options();
  if (running_mean.defined()) return running_mean.options();
  return torch::TensorOptions().dtype(torch::kFloat);
}

void SyncBatchNormImpl::shadow_forward() {
  if (!is_training() || !process_group_ || process_group_->getSize() <= 1) return;
  torch::NoGradGuard no_grad;
  int64_t total = 0;
  gather_statistics(torch::zeros({2 + 2 * options.num_features()}, stats_options()), &total);
}

void SyncBatchNormImpl::shadow_backward() {
  if (!is_training() || !process_group_ || process_group_->getSize() <= 1) return;
  torch::NoGradGuard no_grad;
  reduce_backward_sums(*process_group_, torch::zeros({2 * options.num_features() + 1}, stats_options()),
                       layer_index_, last_active_);
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "lt::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=" << (options.momentum() ? c10::str(*options.momentum()) : std::string("None"))
         << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats() << ")";
}

}  // namespace lt
