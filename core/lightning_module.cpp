#include <lightning_cpp/core/lightning_module.h>

#include <set>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/collective_layer.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/strategy.h>

namespace lt {

torch::Tensor LightningModule::predict_step(const Batch& /*batch*/, int64_t /*batch_idx*/) {
  LT_CHECK(false, "predict_step is not implemented by this LightningModule; override predict_step to predict");
  return {};
}

void LightningModule::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  LT_CHECK(runtime_.results != nullptr, "log('", name, "') called outside a Trainer run");
  runtime_.results->log(name, value, options);
}

void LightningModule::log(const std::string& name, double value, const LogOptions& options) {
  log(name, torch::tensor(value, torch::kDouble), options);
}

int64_t LightningModule::current_epoch() const { return runtime_.state ? runtime_.state->current_epoch : 0; }
int64_t LightningModule::global_step() const { return runtime_.state ? runtime_.state->global_step : 0; }
int64_t LightningModule::global_rank() const { return runtime_.strategy ? runtime_.strategy->global_rank() : 0; }
int64_t LightningModule::world_size() const { return runtime_.strategy ? runtime_.strategy->world_size() : 1; }
torch::Device LightningModule::device() const {
  return runtime_.strategy ? runtime_.strategy->root_device() : torch::Device(torch::kCPU);
}

torch::optim::Optimizer& LightningModule::optimizer(size_t index) {
  LT_CHECK(runtime_.optimizer != nullptr && !runtime_.optimizer->optimizers.empty(),
           "optimizer() is only available during fit, after configure_optimizers()");
  LT_CHECK_VALUE(index < runtime_.optimizer->optimizers.size(), "optimizer(", index, "): configure_optimizers() ",
                 "returned ", runtime_.optimizer->optimizers.size(), " optimizer(s)");
  return *runtime_.optimizer->optimizers[index];
}

size_t LightningModule::num_optimizers() const {
  return runtime_.optimizer != nullptr ? runtime_.optimizer->optimizers.size() : 0;
}

void LightningModule::toggle_optimizer(size_t index) {
  std::set<torch::TensorImpl*> own;
  for (const auto& group : optimizer(index).param_groups()) {
    for (const auto& p : group.params()) own.insert(p.unsafeGetTensorImpl());
  }
  for (size_t i = 0; i < num_optimizers(); ++i) {
    if (i == index) continue;
    for (const auto& group : optimizer(i).param_groups()) {
      for (auto p : group.params()) {
        if (own.count(p.unsafeGetTensorImpl()) != 0) continue;
        untoggled_.emplace_back(p, p.requires_grad());
        p.set_requires_grad(false);
      }
    }
  }
}

void LightningModule::untoggle_optimizer(size_t /*index*/) {
  for (auto& [p, requires_grad] : untoggled_) p.set_requires_grad(requires_grad);
  untoggled_.clear();
}

LRScheduler* LightningModule::lr_scheduler() {
  return runtime_.optimizer ? runtime_.optimizer->lr_scheduler.get() : nullptr;
}

void LightningModule::manual_backward(const torch::Tensor& loss) {
  LT_CHECK(runtime_.strategy != nullptr, "manual_backward called outside a Trainer run");
  runtime_.strategy->backward(runtime_.strategy->precision().pre_backward(loss), *this);
}

void LightningModule::optimizer_step(size_t index) {
  LT_CHECK(runtime_.strategy != nullptr && runtime_.state != nullptr, "optimizer_step called outside a Trainer run");
  auto& precision = runtime_.strategy->precision();
  auto& opt = optimizer(index);
  if (precision.unscale_gradients(opt)) runtime_.strategy->optimizer_step(opt);  // else a scaler skips it
  precision.after_optimizer_step();
  ++runtime_.state->global_step;
}

std::vector<CollectiveLayer*> collective_layers(torch::nn::Module& module) {
  std::vector<CollectiveLayer*> out;
  if (auto* self = dynamic_cast<CollectiveLayer*>(&module)) out.push_back(self);
  for (const auto& child : module.modules(/*include_self=*/false)) {
    if (auto* layer = dynamic_cast<CollectiveLayer*>(child.get())) out.push_back(layer);
  }
  return out;
}

}  // namespace lt
