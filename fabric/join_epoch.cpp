#include <lightning_cpp/fabric/join_epoch.h>

#include <utility>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/fabric/fabric.h>

namespace lt {

namespace {

// What the strategy's refusal of a collective issued in the body says (RunState::unmatched_hooks).
constexpr const char* kBody = "the body of a fabric.join() epoch's loop";
constexpr const char* kBodyFix =
    "Issue it in the step given to fabric.join (every rank calls it, a rank that ran out of data too) or after the "
    "epoch's loop; or give every rank as many batches (setup_dataloader with use_distributed_sampler and "
    "uneven_inputs: pad)";

}  // namespace

JoinEpoch::JoinEpoch(Fabric& fabric, DataLoader& loader, std::function<void()> step, JoinOptions options)
    : fabric_(fabric), loader_(loader), step_(std::move(step)), k_(options.accumulate_grad_batches()) {
  RunState& state = fabric_.state_;
  LT_CHECK(state.interrupted_by == 0, "Fabric::join: the last epoch stopped on signal ", state.interrupted_by,
           " (fabric.interrupted()); save and return instead of starting another");
  if (state.epoch_ended) {
    ++state.current_epoch;
    state.epoch_ended = false;
  }
  loader_.set_epoch(state.current_epoch);
  const int64_t n = loader_.size() == DataLoader::kUnknownSize ? -1 : loader_.size();
  Strategy& strategy = *fabric_.strategy_;
  FeatureSet features;
  features.options = &fabric_.trainer_options_;
  features.module = fabric_.module_.get();
  features.scheduler_per_step = fabric_.optim_.lr_scheduler != nullptr && fabric_.optim_.interval == Interval::kStep;
  features.train_batches = n;
  strategy.check_features(features);  // uneven inputs under Join: refuses what a joined rank could not shadow
  EpochPlan plan;
  plan.num_batches = n;
  plan.accumulate_grad_batches = k_;
  plan.state = &state;
  plan.steps = this;
  // From a mid-epoch checkpoint's position (Fabric::load), at an accumulation window's end.
  driver_ = std::make_unique<EpochDriver>(strategy, *fabric_.module_, loader_, plan);
  fabric_.epoch_ = this;
}

JoinEpoch::~JoinEpoch() {
  // After the loop's end finish() ran; after an exception in the body nothing
  // collective runs here (launch reports the failure on every rank).
  body_.reset();
  forward_.reset();
  driver_.reset();
  if (fabric_.epoch_ == this) fabric_.epoch_ = nullptr;
}

JoinEpoch::Iterator JoinEpoch::begin() {
  LT_CHECK(!started_, "JoinEpoch: iterated a second time; each fabric.join() is one epoch's loop");
  started_ = true;
  advance();
  return Iterator(this);
}

void JoinEpoch::advance() {
  Strategy& strategy = *fabric_.strategy_;
  while (const std::optional<MicroBatch> micro = driver_->next()) {
    micro_ = *micro;
    if (micro_.padding) {
      // A padding micro-batch (Join): this rank's last window closes with the
      // others' (the context ran its forward-side collectives).
      driver_->run_padding(micro_);
      if (end_iteration()) return;
      continue;
    }
    fabric_.state_.batch_idx = micro_.index;
    batch_ = strategy.prepare_batch(loader_.get(micro_.index));
    strategy.before_forward(*fabric_.module_);
    forward_ = strategy.precision().forward_context();
    backward_done_ = false;
    body_.emplace(fabric_.state_, kBody, kBodyFix);
    return;
  }
  finish();
}

void JoinEpoch::next() {
  LT_CHECK(body_.has_value(), "JoinEpoch: advanced past its end");
  body_.reset();
  forward_.reset();
  LT_CHECK(backward_done_, "Fabric: batch ", micro_.index, " of epoch ", fabric_.state_.current_epoch, " (rank ",
           fabric_.global_rank(), ") ended without fabric.backward(loss): under fabric.join() every batch's body "
           "calls it once, since the ranks reduce gradients together (for a batch that must not count, backward "
           "loss * 0)");
  if (micro_.ends_window) optimizer_step();
  if (end_iteration()) return;
  advance();
}

bool JoinEpoch::end_iteration() {
  driver_->end_batch();
  if (!driver_->stops_after(micro_)) return false;
  finish();
  return true;
}

void JoinEpoch::optimizer_step() {
  RunState& state = fabric_.state_;
  UnmatchedHooks matched(state, nullptr);  // every rank takes the step
  Strategy& strategy = *fabric_.strategy_;
  Precision& precision = strategy.precision();
  bool steps = true;  // 16-mixed: not on non-finite scaled gradients
  for (const auto& optimizer : fabric_.optim_.optimizers) steps = precision.unscale_gradients(*optimizer) && steps;
  if (steps) {
    strategy.run_optimizer_step(step_);  // a sharding strategy gathers the updated shards after it
  } else {
    strategy.release_gradients();
    for (const auto& optimizer : fabric_.optim_.optimizers) optimizer->zero_grad();
  }
  precision.after_optimizer_step();
  ++state.global_step;
}

void JoinEpoch::backward(const torch::Tensor& loss) {
  LT_CHECK(body_.has_value(), "Fabric::backward: outside the body of the fabric.join() loop it belongs to");
  LT_CHECK(!backward_done_, "Fabric::backward: called a second time in batch ", micro_.index, " of epoch ",
           fabric_.state_.current_epoch, " (rank ", fabric_.global_rank(), "): under fabric.join() each batch ",
           "reduces its gradients once; backward the sum of the losses");
  backward_done_ = true;
  forward_.reset();
  Strategy& strategy = *fabric_.strategy_;
  LightningModule& module = *fabric_.module_;
  strategy.after_forward(module, loss);
  strategy.backward(strategy.precision().pre_backward(k_ == 1 ? loss : loss / static_cast<double>(k_)), module);
}

void JoinEpoch::finish() {
  driver_->finish();  // a rank that ran out of data shadows the others here
  fabric_.state_.epoch_ended = !driver_->stopped();
  done_ = true;
  fabric_.epoch_ = nullptr;
}

}  // namespace lt
