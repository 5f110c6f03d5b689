#include <lightning_cpp/fabric/join_epoch.h>

#include <csignal>
#include <utility>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/signals.h>
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
  // A mid-epoch checkpoint's position (Fabric::load), at an accumulation window's end.
  iteration_ = std::exchange(state.resume_iteration, 0);
  state.epoch_iteration = iteration_;
  const int64_t n = loader_.size() == DataLoader::kUnknownSize ? -1 : loader_.size();
  state.num_training_batches = n;
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
  plan.first_iteration = iteration_;
  plan.joined_step = [this] { this->step(); };
  // A rank that joined counts the iterations it shadows (a checkpoint after
  // an agreed stop resumes every rank at the same one).
  plan.joined_iteration_end = [&state](int64_t iteration) { state.epoch_iteration = iteration + 1; };
  plan.stops_after = [this](bool window_end) {
    return window_end && context_->stop_requested(interrupt_signal() != 0);
  };
  context_ = strategy.training_epoch_context(*fabric_.module_, plan);
  state.epoch_length = context_->epoch_length();
  fabric_.epoch_ = this;
}

JoinEpoch::~JoinEpoch() {
  // After the loop's end finish() ran; after an exception in the body nothing
  // collective runs here (launch reports the failure on every rank).
  body_.reset();
  forward_.reset();
  guard_.reset();
  context_.reset();
  if (fabric_.epoch_ == this) fabric_.epoch_ = nullptr;
}

JoinEpoch::Iterator JoinEpoch::begin() {
  LT_CHECK(!started_, "JoinEpoch: iterated a second time; each fabric.join() is one epoch's loop");
  started_ = true;
  advance();
  return Iterator(this);
}

bool JoinEpoch::window_end(int64_t iteration) const {
  const int64_t iterations = context_->plan().num_batches >= 0 ? context_->num_iterations() : -1;
  return (iteration + 1) % k_ == 0 || iteration + 1 == iterations;
}

// A stream's end (no batch `iteration`): from here the context counts it.
void JoinEpoch::find_end(int64_t iteration) {
  if (context_->plan().num_batches >= 0 || loader_.has_batch(iteration)) return;
  context_->set_num_batches(iteration);
  fabric_.state_.num_training_batches = iteration;
  fabric_.state_.epoch_length = context_->epoch_length();
}

void JoinEpoch::advance() {
  Strategy& strategy = *fabric_.strategy_;
  LightningModule& module = *fabric_.module_;
  RunState& state = fabric_.state_;
  while (true) {
    find_end(iteration_);
    if (context_->plan().num_batches >= 0 && iteration_ >= context_->num_iterations()) {
      finish();
      return;
    }
    find_end(iteration_ + 1);
    const bool ends_window = window_end(iteration_);
    guard_ = context_->batch(iteration_, ends_window);
    if (context_->plan().num_batches >= 0 && iteration_ >= context_->plan().num_batches) {
      // A padding micro-batch (Join): this rank's last window closes with the
      // others' (the context ran its forward-side collectives).
      strategy.backward(zero_loss(module, strategy.root_device()), module);
      if (ends_window) step();
      if (end_iteration(ends_window)) return;
      continue;
    }
    state.batch_idx = iteration_;
    batch_ = strategy.prepare_batch(loader_.get(iteration_));
    strategy.before_forward(module);
    forward_ = strategy.precision().forward_context();
    backward_done_ = false;
    body_.emplace(state, kBody, kBodyFix);
    return;
  }
}

void JoinEpoch::next() {
  LT_CHECK(body_.has_value(), "JoinEpoch: advanced past its end");
  body_.reset();
  forward_.reset();
  LT_CHECK(backward_done_, "Fabric: batch ", iteration_, " of epoch ", fabric_.state_.current_epoch, " (rank ",
           fabric_.global_rank(), ") ended without fabric.backward(loss): under fabric.join() every batch's body "
           "calls it once, since the ranks reduce gradients together (for a batch that must not count, backward "
           "loss * 0)");
  const bool ends_window = window_end(iteration_);
  if (ends_window) step();
  if (end_iteration(ends_window)) return;
  advance();
}

bool JoinEpoch::end_iteration(bool ends_window) {
  RunState& state = fabric_.state_;
  context_->end_batch(iteration_);
  guard_.reset();
  state.epoch_iteration = ++iteration_;
  if (!context_->plan().stops_after(ends_window)) return false;
  state.interrupted_by = interrupt_signal() != 0 ? interrupt_signal() : SIGTERM;
  stopped_ = true;
  finish();
  return true;
}

void JoinEpoch::step() {
  RunState& state = fabric_.state_;
  UnmatchedHooks matched(state, nullptr);  // every rank takes the step
  Strategy& strategy = *fabric_.strategy_;
  Precision& precision = strategy.precision();
  strategy.release_gradients();
  bool steps = true;  // 16-mixed: not on non-finite scaled gradients
  for (const auto& optimizer : fabric_.optim_.optimizers) steps = precision.unscale_gradients(*optimizer) && steps;
  if (steps) {
    step_();
    strategy.after_optimizer_step();  // a sharding strategy gathers the updated shards
  } else {
    for (const auto& optimizer : fabric_.optim_.optimizers) optimizer->zero_grad();
  }
  precision.after_optimizer_step();
  ++state.global_step;
}

void JoinEpoch::backward(const torch::Tensor& loss) {
  LT_CHECK(body_.has_value(), "Fabric::backward: outside the body of the fabric.join() loop it belongs to");
  LT_CHECK(!backward_done_, "Fabric::backward: called a second time in batch ", iteration_, " of epoch ",
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
  RunState& state = fabric_.state_;
  context_->finish();  // a rank that ran out of data shadows the others here
  // A stop another rank asked for reaches this one at the epoch's end at the latest.
  if (!stopped_ && context_->stop_requested(interrupt_signal() != 0)) {
    state.interrupted_by = interrupt_signal() != 0 ? interrupt_signal() : SIGTERM;
    stopped_ = true;
  }
  state.epoch_ended = !stopped_;
  done_ = true;
  fabric_.epoch_ = nullptr;
}

}  // namespace lt
