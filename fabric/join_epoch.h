#pragma once
// JoinEpoch: one training epoch of a loop the user keeps, in the strategy's
// one context of no_sync accumulation and Join (plugins/join/epoch_context.h:
// the Trainer's training epoch runs in the same context, with the same
// checks). Made by Fabric::join:
//
//   auto step = [&] { fabric.clip_gradients(*optimizer, 1.0); optimizer->step(); optimizer->zero_grad(); };
//   for (lt::Batch& batch : fabric.join(*loader, step, lt::JoinOptions().accumulate_grad_batches(2))) {
//     fabric.backward(torch::mse_loss(model->forward(batch.data), batch.target));
//   }
//
// Per micro-batch `it` of this rank (window w = micro-batches [w*k, (w+1)*k)):
//   1. before the body: the strategy's forward-side collectives (DDP: the
//      Join heartbeat, the grad-sync flag), no_sync unless `it` ends a window;
//      the body then runs under the precision's forward context;
//   2. the body: a forward and exactly one Fabric::backward(loss), which
//      reduces the gradients of loss / k at a window's end; the body issues
//      no other collective (a rank that ran out of data could not match it:
//      under uneven Join it is refused where it is issued, at the first
//      micro-batch, before any step);
//   3. after the body, at a window's end (and at this rank's last micro-batch,
//      which closes its window with zero-loss padding micro-batches when
//      other ranks have more): the step the user gave, every rank together.
// When this rank's data ends it keeps shadowing the others' collectives and,
// in lockstep Join (the default), calls the same step on the reduced
// gradient, so that every rank holds the same model and optimizer state
// after every step; join_mode pytorch is PyTorch's Join (no step).
// The step may issue collectives (clip_gradients by the global norm,
// all_reduce of a metric): every rank calls it the same number of times.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include <torch/torch.h>

#include <lightning_cpp/core/batch.h>
#include <lightning_cpp/core/precision.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/plugins/join/epoch_driver.h>

namespace lt {

class DataLoader;
class Fabric;

struct JoinOptions {
  // Micro-batches per optimizer step (Lightning's accumulate_grad_batches):
  // Fabric::backward divides each loss by it, as the Trainer does.
  //   lt::JoinOptions().accumulate_grad_batches(4)
  TORCH_ARG(int64_t, accumulate_grad_batches) = 1;
};

// The epoch's micro-batches come from the epoch driver (plugins/join/epoch_driver.h),
// the same the Trainer's training epoch loop iterates.
class JoinEpoch : private EpochSteps {
 public:
  // Fabric::join makes it; the epoch is Fabric::current_epoch().
  JoinEpoch(Fabric& fabric, DataLoader& loader, std::function<void()> step, JoinOptions options);
  ~JoinEpoch() override;
  JoinEpoch(const JoinEpoch&) = delete;
  JoinEpoch& operator=(const JoinEpoch&) = delete;

  class Iterator {
   public:
    explicit Iterator(JoinEpoch* epoch) : epoch_(epoch) {}
    Batch& operator*() const { return epoch_->batch_; }
    Batch* operator->() const { return &epoch_->batch_; }
    Iterator& operator++() {
      epoch_->next();
      return *this;
    }
    // Only against end().
    bool operator!=(const Iterator& /*end*/) const { return !epoch_->done_; }

   private:
    JoinEpoch* epoch_;
  };
  // This rank's batches (on the device, in the precision's dtype); iterated once.
  Iterator begin();
  Iterator end() { return Iterator(this); }

  // The ranks agreed to stop early (a signal: SIGTERM, SIGINT): the loop ended
  // after the same optimizer step on every rank. Fabric::interrupted() names the signal.
  bool stopped() const { return driver_->stopped(); }

 private:
  friend class Fabric;
  // The rest of the current iteration after the body, then the next one.
  void next();
  // Runs iterations until one has a batch for the body, or the epoch ends.
  void advance();
  // The end of the current iteration: true when the epoch ended there (an agreed stop).
  bool end_iteration();
  // Fabric::backward inside the body.
  void backward(const torch::Tensor& loss);
  void finish();

  // EpochSteps: the step, through the strategy, on every rank together (a
  // joined one's too, in lockstep); a joined rank has nothing more to do at
  // an iteration's end (RunState::epoch_iteration counts it).
  bool steps_without_batch() const override { return true; }
  void optimizer_step() override;
  void joined_iteration_end(int64_t /*iteration*/) override {}

  Fabric& fabric_;
  DataLoader& loader_;
  std::function<void()> step_;
  int64_t k_;
  std::unique_ptr<EpochDriver> driver_;
  MicroBatch micro_;  // the current iteration's
  std::unique_ptr<ForwardContext> forward_;
  // While the body runs: the strategy refuses a collective a joined rank could not match.
  std::optional<UnmatchedHooks> body_;
  Batch batch_;
  bool started_ = false;
  bool backward_done_ = false;
  bool done_ = false;
};

}  // namespace lt
