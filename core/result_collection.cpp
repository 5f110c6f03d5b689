#include <lightning_cpp/core/result_collection.h>

#include <algorithm>

#include <lightning_cpp/core/check.h>

namespace lt {

void ResultCollection::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  LT_CHECK(value.numel() == 1, "log('", name, "'): expected a scalar, got a tensor of shape ", value.sizes());
  torch::Tensor v = value.detach().to(torch::kCPU, torch::kDouble).reshape({});
  if (options.sync_dist() && deferred_ != nullptr) {
    deferred_->defer(PendingSync{name, v.item<double>(), options, batch_size_});
    return;
  }
  if (options.sync_dist() && sync_) v = sync_(v, options.reduce_fx());
  record(name, v.item<double>(), options, batch_size_);
}

void ResultCollection::record_synced(const PendingSync& pending, double reduced) {
  record(pending.name, reduced, pending.options, pending.batch_size);
}

void ResultCollection::record(const std::string& name, double x, const LogOptions& options, int64_t batch_size) {
  const bool train_step = stage_ == Stage::kTrain && in_step_hook_;
  Entry& entry = entries_[name];
  entry.options = options;
  entry.on_step = options.on_step().value_or(train_step);
  entry.on_epoch = options.on_epoch().value_or(!train_step);
  if (entry.on_step) entry.step_value = x;
  if (entry.on_epoch) {
    const double w = static_cast<double>(options.batch_size().value_or(batch_size));
    entry.weighted_sum += x * w;
    entry.weight += w;
    entry.sum += x;
    if (!entry.has_epoch_value) entry.extreme = x;
    if (options.reduce_fx() == ReduceOp::kMin) entry.extreme = std::min(entry.extreme, x);
    if (options.reduce_fx() == ReduceOp::kMax) entry.extreme = std::max(entry.extreme, x);
    entry.has_epoch_value = true;
  }
  const std::string key = entry.on_step && entry.on_epoch ? name + "_step" : name;
  if (entry.on_step) publish(name, key, x, options.prog_bar());
}

std::map<std::string, double> ResultCollection::take_step_metrics(bool for_logger) {
  std::map<std::string, double> out;
  for (auto& [name, entry] : entries_) {
    if (!entry.step_value) continue;
    if (!for_logger || entry.options.logger()) out[entry.on_epoch ? name + "_step" : name] = *entry.step_value;
    entry.step_value.reset();
  }
  return out;
}

std::map<std::string, double> ResultCollection::take_epoch_metrics(bool for_logger) {
  std::map<std::string, double> out;
  for (auto& [name, entry] : entries_) {
    if (!entry.has_epoch_value) continue;
    double value = entry.weighted_sum / std::max(entry.weight, 1e-300);
    if (entry.options.reduce_fx() == ReduceOp::kSum) value = entry.sum;
    if (entry.options.reduce_fx() == ReduceOp::kMin || entry.options.reduce_fx() == ReduceOp::kMax)
      value = entry.extreme;
    const std::string key = entry.on_step ? name + "_epoch" : name;
    if (!for_logger || entry.options.logger()) out[key] = value;
    publish(name, key, value, entry.options.prog_bar());
  }
  reset_epoch();
  return out;
}

void ResultCollection::publish(const std::string& name, const std::string& key, double value, bool prog_bar) {
  if (callback_metrics_ != nullptr) {
    (*callback_metrics_)[name] = value;
    (*callback_metrics_)[key] = value;
  }
  if (prog_bar && progress_bar_metrics_ != nullptr) (*progress_bar_metrics_)[key] = value;
}

void ResultCollection::reset_epoch() { entries_.clear(); }

}  // namespace lt
