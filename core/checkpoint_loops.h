#pragma once
// A checkpoint's "loops": Lightning 2.6's progress counters of its loops
// (fit_loop, validate_loop, test_loop, predict_loop), which its Trainer reads
// to resume: fit_loop's epoch_progress says whether the epoch was finished,
// its epoch_loop's batch_progress how many batches of an unfinished one were
// done, and automatic (or manual) optimization's step counter is its
// global_step. We write the counters Lightning would hold at the same point
// (an epoch's end: on_train_epoch_end; mid-epoch: on_train_batch_end; before
// an epoch: as after fit), so that its `Trainer.fit(ckpt_path=...)` resumes
// where we stopped, and read a position from Lightning's. Counters we do not
// keep (batches of earlier epochs, the scheduler's and evaluation loops'
// progress) are written as Lightning's Trainer resumes them: relations it
// reads, not totals it uses.

#include <cstdint>
#include <string>

#include <lightning_cpp/core/types.h>

namespace lt {

// Where a run stands, in our counters (core/run_state.h's).
struct LoopsPosition {
  int64_t current_epoch = 0;    // the epoch being run, or just finished
  bool epoch_finished = false;  // current_epoch's batches are all done (resume at the next)
  int64_t epoch_iteration = 0;  // an unfinished epoch's batches done
  int64_t epoch_length = 0;     // a finished epoch's batches (-1: unknown)
  int64_t global_step = 0;      // optimizer steps
};

// Lightning's "loops" entry for `position`; its optimizer steps under
// automatic optimization, or manual's.
StateDict lightning_loops(const LoopsPosition& position, bool automatic_optimization);

// The position a Lightning checkpoint's "loops" and "global_step" say (its
// fit_loop's counters); `path` names the checkpoint in the ValueError for
// counters that are not Lightning's.
LoopsPosition position_from_lightning_loops(const StateDict& loops, int64_t global_step, const std::string& path);

}  // namespace lt
