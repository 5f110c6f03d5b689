#include <lightning_cpp/plugins/join/epoch_driver.h>

#include <csignal>
#include <utility>

#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/data/data_loader.h>

namespace lt {

EpochDriver::EpochDriver(Strategy& strategy, LightningModule& module, DataLoader& loader, EpochPlan plan,
                         int64_t limit)
    : strategy_(strategy), module_(module), loader_(loader), state_(*plan.state), limit_(limit) {
  plan.first_iteration = std::exchange(state_.resume_iteration, 0);
  iteration_ = plan.first_iteration;
  state_.epoch_iteration = iteration_;
  state_.num_training_batches = plan.num_batches;
  context_ = strategy_.training_epoch_context(module_, plan);
  state_.epoch_length = context_->epoch_length();
}

EpochDriver::~EpochDriver() {
  guard_.reset();  // before the context it guards a micro-batch of
  context_.reset();
}

// A stream's end: no batch `iteration` (or the limit): from here the context counts it.
void EpochDriver::find_end(int64_t iteration) {
  if (num_batches() >= 0 || (iteration < limit_ && loader_.has_batch(iteration))) return;
  context_->set_num_batches(iteration);
  state_.num_training_batches = iteration;
  state_.epoch_length = context_->epoch_length();
}

std::optional<MicroBatch> EpochDriver::next() {
  find_end(iteration_);
  if (num_batches() >= 0 && iteration_ >= context_->num_iterations()) return std::nullopt;
  // One batch ahead, so that the last batch is known as such: it ends the
  // accumulation window, or starts the padding to its end (Join).
  find_end(iteration_ + 1);
  const int64_t iterations = num_batches() >= 0 ? context_->num_iterations() : -1;
  MicroBatch micro;
  micro.index = iteration_;
  micro.padding = num_batches() >= 0 && iteration_ >= num_batches();
  micro.ends_window = (iteration_ + 1) % context_->plan().accumulate_grad_batches == 0 || iteration_ + 1 == iterations;
  guard_ = context_->batch(iteration_, micro.ends_window);
  return micro;
}

void EpochDriver::run_padding(const MicroBatch& micro) {
  EpochSteps& steps = *context_->plan().steps;
  if (!steps.steps_without_batch()) return;  // manual optimization: no accumulation windows of ours
  strategy_.backward(zero_loss(module_, strategy_.root_device()), module_);
  if (micro.ends_window) steps.optimizer_step();
}

void EpochDriver::end_batch() {
  context_->end_batch(iteration_);
  guard_.reset();
  state_.epoch_iteration = ++iteration_;
}

void EpochDriver::stop() {
  // A stop that is not max_steps or should_stop is a signal's (this rank's or another's).
  if (!context_->max_steps_reached() && !state_.should_stop) {
    state_.interrupted_by = interrupt_signal() != 0 ? interrupt_signal() : SIGTERM;
  }
  stopped_ = true;
}

bool EpochDriver::stops_after(const MicroBatch& micro) {
  if (context_->stops_after(micro.ends_window)) stop();
  return stopped_;
}

void EpochDriver::finish() {
  context_->finish();
  // A stop another rank asked for reaches this one at the epoch's end at the latest.
  if (!stopped_ && !context_->max_steps_reached() && !state_.should_stop &&
      context_->stop_requested(interrupt_signal() != 0)) {
    stop();
  }
}

}  // namespace lt
