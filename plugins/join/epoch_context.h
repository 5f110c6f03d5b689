#pragma once
// The training epochs of a data-parallel strategy: one context combining
// no_sync accumulation with Join. Each depends on the Strategy interface (its
// collectives), a GradientSync (gradient_sync.h: DDP's Reducer wrapper, or a
// strategy's own) and the collective watchdog only. Below, "the gradient
// sync's collectives" are DDP's as an example; another GradientSync issues
// its own, in the order gradient_sync.h states.
//
// no_sync (uneven_inputs: pad | error): gradients are reduced only on the
// micro-batch that ends an accumulation window; the others run under
// no_sync. Every rank runs the same iterations, so each issues the same
// collectives, and the gradient allreduce that ends each window carries the
// ranks' wishes to stop (a signal), so all stop after the same window.
//
// Join (uneven_inputs: join): ONE Join context around the whole epoch, a
// per-micro-batch guard (no_sync on accumulation micro-batches) and the
// end-of-epoch boundary.
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
//     per window on the union of the ranks' micro-batches. join_mode pytorch:
//     a joined rank does not step (PyTorch's Join).
//   - Gradient of window w = (1/D) * sum over every rank's micro-batches of w of
//     grad(loss/k); D = initial world size, or with divide_by_initial_world_size
//     off the number of ranks active at w's synced iteration (the ranks with
//     data in w: the heartbeat of that iteration counts them).
//
// At the epoch's start (2+ ranks): one allreduce of the ranks' batch counts
// (the fewest and the most; an allgather names them when no_sync refuses).
// Join: the longest is the epoch_length() validation points count in;
// no_sync (and Join disabled): counts that differ are refused there, on every
// rank, naming them (the loaders were evened out before training; see
// distributed/uneven_inputs.h), so no rank waits in an allreduce another never issues.
//
// Collectives of one iteration, in order, on the DDP process group:
//   active rank (real or padding micro-batch):
//     1. DDP pre_forward: Join heartbeat allreduce(ones) [+ with
//        throw_on_early_termination the blocking check allreduce(zeros)],
//        bucket rebuild broadcast (once), buffer sync (find_common_rank +
//        broadcast) when due, the grad-sync flag allreduce (1, or 0 under no_sync).
//     2. backward: on the window's last micro-batch, one allreduce per bucket,
//        the first with the agreed-stop flag (+ unused-parameter map with
//        find_unused_parameters).
//     3. end_batch: the sync_dist logging reduction (join/joinable_logging.h).
//     4. the loop's iteration end: after a step, on_after_optimizer_step
//        (ModelCheckpoint's barrier, the Timer's agreement); at a validation
//        point, validation (sync_dist reductions, EarlyStopping's decision).
//   joined rank (in finish(), Join::join per active iteration):
//     allreduce(zeros) matching 1's heartbeat [throw mode: allreduce(ones), throw],
//     DDP main hook (shadows 1's rest and 2; lockstep: then the optimizer
//     step, whose hooks may issue their own matched collectives, as the active
//     ranks' step does between 2 and 3), the strategy's extra joinables' main
//     hooks (EpochParts::joinables, in order), logging main hook (shadows 3),
//     loop main hook (EpochSteps::joined_iteration_end: runs 4 with the others).
//   after every rank joined: DDP post hook (final model broadcast from the
//   highest last joiner; lockstep: the parameters are equal already, it
//   aligns the buffers), then, in pytorch mode, one allreduce(MAX) of
//   global_step, so every rank counts the steps of the model it now holds.
// Scheduled Join (lockstep, every rank's count known at the epoch's start,
// divide_by_initial_world_size; join.h): 1 sends no heartbeat, no throw
// check and no grad-sync flag; a joined rank shadows, without the matching
// allreduces, while the counts (and the stops every rank agrees on:
// TrainingEpochContext::stops_after) say the others train, its gradient sync from the
// windows; 3's header is skipped at iterations every rank has a batch of;
// throw mode throws where the shortest rank runs out. The ranks agree on a
// signal's stop in the gradient allreduce that ends each window, as no_sync
// does (a joined rank's wish rides in its zero bucket).
// With Join disabled (join_enable: false), the context first compares the
// ranks' batch counts and refuses uneven ones with an error on every rank
// (instead of a hang in the first unmatched gradient allreduce).

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
