#pragma once
// EpochDriver: one training epoch of this rank, as the loop iterating it sees
// it. The Trainer's training epoch loop and Fabric::join iterate it; it owns
// what both did alike: the strategy's epoch context (no_sync accumulation,
// Join; epoch_context.h), the micro-batch sequence (the accumulation windows,
// the padding micro-batches that close this rank's last window with the
// others'), the end of a stream of unknown length, the agreed stop and the
// epoch's finish, and the RunState counters of the epoch (epoch_iteration,
// num_training_batches, epoch_length, interrupted_by).
//
//   lt::EpochDriver driver(strategy, module, loader, plan);
//   while (auto micro = driver.next()) {
//     if (micro->padding) driver.run_padding(*micro);
//     else { /* the batch loader.get(micro->index): forward, backward, the step at micro->ends_window */ }
//     driver.end_batch();
//     /* the iteration's end: hooks, logging, validation */
//     if (driver.stops_after(*micro)) break;
//   }
//   driver.finish();  // a rank that ran out of data shadows the others here (Join)

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

#include <lightning_cpp/core/strategy.h>

namespace lt {

class DataLoader;

struct MicroBatch {
  int64_t index = 0;  // in the epoch, counted alike on every rank
  // Past this rank's data (Join): a zero loss closes its last window with
  // the others' (run_padding); there is no batch.
  bool padding = false;
  // The window's last: gradients are reduced, the optimizer step follows.
  bool ends_window = false;
};

class EpochDriver {
 public:
  // Opens the epoch's context (Strategy::training_epoch_context). plan.num_batches
  // is -1 for a stream of unknown length: its end is found with
  // loader.has_batch, or at `limit` batches. plan.first_iteration is taken
  // from plan.state->resume_iteration (a mid-epoch checkpoint's), which is reset.
  EpochDriver(Strategy& strategy, LightningModule& module, DataLoader& loader, EpochPlan plan,
              int64_t limit = std::numeric_limits<int64_t>::max());
  ~EpochDriver();
  EpochDriver(const EpochDriver&) = delete;
  EpochDriver& operator=(const EpochDriver&) = delete;

  // The epoch's length in micro-batches as every rank counts it (validation
  // points): the longest rank's under Join; -1 for a stream until its end.
  int64_t epoch_length() const { return context_->epoch_length(); }
  // This rank's batches; -1 until a stream's end.
  int64_t num_batches() const { return context_->plan().num_batches; }

  // The next micro-batch, its guard open (no_sync on accumulation
  // micro-batches); nullopt when this rank's iterations are done.
  std::optional<MicroBatch> next();
  // A padding micro-batch's optimization: backward of a zero loss and, at
  // the window's end, the loop's optimizer step (EpochSteps). Nothing where
  // the steps are the user's (manual optimization).
  void run_padding(const MicroBatch& micro);
  // After the micro-batch's optimization: the context's end of the batch
  // (Join: the logging reduction), its guard released; epoch_iteration counts it.
  void end_batch();
  // After the iteration's end: whether every rank stops here (max_steps,
  // should_stop, an agreed stop; a signal's stop sets interrupted_by).
  bool stops_after(const MicroBatch& micro);
  // After the last iteration (or a stop): Join's shadowing of the ranks still
  // training, the epoch's end in the gradient sync, and a stop another rank
  // asked for, which reaches this one here at the latest.
  void finish();
  // The epoch ended early on every rank (stops_after, or an agreed stop found in finish()).
  bool stopped() const { return stopped_; }

 private:
  void find_end(int64_t iteration);
  void stop();

  Strategy& strategy_;
  LightningModule& module_;
  DataLoader& loader_;
  RunState& state_;
  int64_t limit_;
  std::unique_ptr<TrainingEpochContext> context_;
  std::unique_ptr<BatchGuard> guard_;
  int64_t iteration_;  // the next micro-batch's index
  bool stopped_ = false;
};

}  // namespace lt
