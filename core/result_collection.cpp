#include <lightning_cpp/core/result_collection.h>

#include <algorithm>

#include <torch/serialize.h>

#include <lightning_cpp/core/check.h>

namespace lt {

void ResultCollection::log(const std::string& name, const torch::Tensor& value, const LogOptions& options) {
  LT_CHECK(value.numel() == 1, "log('", name, "'): expected a scalar, got a tensor of shape ", value.sizes());
  torch::Tensor v = value.detach().to(torch::kCPU, torch::kDouble).reshape({});
  if (options.sync_dist() && deferred_ != nullptr) {
    deferred_->defer(PendingSync{name, v.item<double>(), options, batch_size_});
    return;
  }
  if (options.sync_dist() && gather_) {
    // Evaluation: an epoch value is reduced exactly in take_epoch_metrics();
    // a per-step value is reduced now, as in training, if the ranks' steps match.
    if (!options.on_step().value_or(false)) {
      record(name, v.item<double>(), options, batch_size_);
      return;
    }
    LT_CHECK(uneven_batches_.empty(), "log('", name, "', on_step=true, sync_dist=true) in ", stage_name(stage_),
             ": the ranks run different numbers of batches (", uneven_batches_,
             "), so a reduction per step could not be matched. Log it with on_step=false: the epoch value is "
             "reduced exactly, weighted by every rank's samples");
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

void ResultCollection::merge_ranks() {
  // This rank's deferred aggregates (sync_dist, epoch only: per-step values were reduced when logged).
  c10::impl::GenericList mine(c10::AnyType::get());
  for (const auto& [name, e] : entries_) {
    if (!e.options.sync_dist() || e.on_step || !e.has_epoch_value) continue;
    mine.push_back(c10::ivalue::Tuple::create({name, static_cast<int64_t>(e.options.reduce_fx()), e.weighted_sum,
                                               e.weight, e.sum, e.extreme, e.options.prog_bar(), e.options.logger()}));
  }
  const std::vector<char> bytes = torch::pickle_save(mine);
  std::map<std::string, Entry> merged;
  for (const std::string& rank_bytes : gather_(std::string(bytes.begin(), bytes.end()))) {
    const c10::IValue list = torch::pickle_load(std::vector<char>(rank_bytes.begin(), rank_bytes.end()));
    for (const c10::IValue& item : list.toListRef()) {
      const auto& f = item.toTupleRef().elements();
      const auto op = static_cast<ReduceOp>(f[1].toInt());
      const double extreme = f[5].toDouble();
      auto [it, first] = merged.try_emplace(f[0].toStringRef());
      Entry& m = it->second;
      if (first) {
        m.options = LogOptions().sync_dist(true).reduce_fx(op).prog_bar(f[6].toBool()).logger(f[7].toBool());
        m.on_epoch = true;
        m.has_epoch_value = true;
        m.extreme = extreme;
      }
      LT_CHECK(m.options.reduce_fx() == op, "log('", it->first, "', sync_dist=true): the ranks reduce it differently");
      m.weighted_sum += f[2].toDouble();
      m.weight += f[3].toDouble();
      m.sum += f[4].toDouble();
      if (op == ReduceOp::kMin) m.extreme = std::min(m.extreme, extreme);
      if (op == ReduceOp::kMax) m.extreme = std::max(m.extreme, extreme);
    }
  }
  for (auto& [name, entry] : merged) entries_[name] = std::move(entry);
}

std::map<std::string, double> ResultCollection::take_epoch_metrics(bool for_logger) {
  if (gather_) merge_ranks();
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
