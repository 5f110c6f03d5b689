#pragma once
// The training epochs of a data-parallel strategy: one context combining
// no_sync accumulation with Join. Each depends on the Strategy interface (its
// collectives), a GradientSync (gradient_sync.h: DDP's Reducer wrapper, or a
// strategy's own) and the collective watchdog only. The epoch driver
// (epoch_driver.h) opens one per epoch and iterates it.
//
// The collectives of an iteration, in order, and what a joined rank runs to
// match each: plugins/join/gradient_sync.h, the protocol table.
//
// no_sync (uneven_inputs: pad | error): gradients are reduced only on the
// micro-batch that ends an accumulation window; the others run under
// no_sync. Every rank runs the same iterations, so each issues the same
// collectives. The loaders were evened out before training (see
// distributed/uneven_inputs.h); counts that still differ are refused at the
// epoch's start on every rank, naming them (instead of a hang in the first
// unmatched gradient allreduce); so with Join disabled (join_enable: false).
//
// Join (uneven_inputs: join): ONE Join context around the whole epoch, a
// per-micro-batch guard (no_sync on accumulation micro-batches) and the
// end-of-epoch boundary. The longest rank's count is the epoch_length()
// validation points count in.
//
// Invariants, for a rank with n batches, k = accumulate_grad_batches:
//   - Windows are aligned on the micro-batch index: window w is micro-batches
//     [w*k, (w+1)*k) of every rank that has them. With Join enabled a rank runs
//     num_iterations() = ceil(n/k)*k iterations; iterations >= n are zero-loss
//     padding micro-batches (sum(p*0): every reducer hook fires), so a rank whose
//     data ends inside a window reduces its pending accumulated gradient in
//     that window's synced step and takes the step with everyone. It then
//     joins at a window boundary: no sample is dropped and there is exactly one
//     optimizer step per window on every rank still training.
//   - join_mode lockstep (the default): a joined rank takes that step too, on
//     the gradient its shadowed bucket allreduces return (the same bits the
//     active ranks hold), through the loop's EpochSteps::optimizer_step. So after
//     every step parameters, optimizer and scheduler state and global_step
//     are equal on every rank, and training equals one optimizer stepping once
//     per window on the union of the ranks' micro-batches; the post hooks'
//     broadcast from the last joiner only aligns the buffers. join_mode
//     pytorch: a joined rank does not step (PyTorch's Join); it takes the last
//     joiner's model and its global_step (the allreduce(MAX) after the post
//     hooks), so that every rank counts the steps of the model it holds.
//   - Gradient of window w = (1/D) * sum over every rank's micro-batches of w of
//     grad(loss/k); D = initial world size, or with divide_by_initial_world_size
//     off the number of ranks active at w's synced iteration (the ranks with
//     data in w: the heartbeat of that iteration counts them).

#include <memory>
#include <vector>

#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/plugins/join/gradient_sync.h>
#include <lightning_cpp/plugins/join/join_compatibility.h>

namespace lt {

class CollectiveWatchdog;
class LightningModule;

// What an epoch context works with: the strategy's collectives, the module's
// gradient sync, the watchdog (null with one rank), and the strategy's other
// joinables (an optimizer that communicates, a user's own collective): they
// join after the gradient sync, their main hooks run after its main hook.
struct EpochParts {
  Strategy& strategy;
  GradientSync& sync;
  CollectiveWatchdog* watchdog;
  std::vector<Joinable*> joinables;
};

// uneven_inputs: pad | error.
std::unique_ptr<TrainingEpochContext> make_no_sync_epoch_context(EpochParts parts, const EpochPlan& plan);

// uneven_inputs: join.
std::unique_ptr<TrainingEpochContext> make_join_epoch_context(EpochParts parts, LightningModule& module,
                                                              const EpochPlan& plan, const JoinSettings& settings);

// ceil(n / k) * k with Join enabled, else n.
int64_t join_num_iterations(int64_t num_batches, int64_t accumulate_grad_batches, bool join_enabled);

}  // namespace lt
