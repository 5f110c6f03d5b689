#include <lightning_cpp/core/checkpoint_loops.h>

#include <algorithm>
#include <initializer_list>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

// Lightning's progress trackers (loops/progress.py), their fields in its order:
// _ReadyCompletedTracker (ready, completed), _StartedTracker (+ started),
// _ProcessedTracker (+ processed).
enum class Tracker { kReadyCompleted, kStarted, kProcessed };

// A tracker's counts (started: as ready). A batch or epoch is processed before
// its end hooks run, and completed after them.
struct Counts {
  int64_t ready = 0;
  int64_t processed = 0;
  int64_t completed = 0;
};
Counts all(int64_t n) { return {n, n, n}; }

StateDict tracker(Tracker kind, const Counts& c) {
  StateDict t = new_state_dict();
  t.insert("ready", c.ready);
  t.insert("completed", c.completed);
  if (kind != Tracker::kReadyCompleted) t.insert("started", c.ready);
  if (kind == Tracker::kProcessed) t.insert("processed", c.processed);
  return t;
}

// {"total", "current"}: we count no totals over earlier epochs; the current counts stand for them.
StateDict progress(Tracker kind, const Counts& c) {
  StateDict p = new_state_dict();
  p.insert("total", tracker(kind, c));
  p.insert("current", tracker(kind, c));
  return p;
}

StateDict batch_progress(const Counts& c, bool is_last_batch) {
  StateDict p = progress(Tracker::kProcessed, c);
  p.insert("is_last_batch", is_last_batch);
  return p;
}

StateDict evaluation_loop(bool with_last_batch) {
  StateDict loop = new_state_dict();
  loop.insert("state_dict", new_state_dict());
  if (with_last_batch) {
    loop.insert("batch_progress", batch_progress(all(0), false));
  } else {
    loop.insert("batch_progress", progress(Tracker::kProcessed, all(0)));
  }
  return loop;
}

StateDict dict_at(const StateDict& dict, std::initializer_list<const char*> keys, const std::string& path) {
  StateDict at = dict;  // a handle: no copy of the entries
  std::string where = "loops";
  for (const char* key : keys) {
    where += c10::str(".", key);
    LT_CHECK_VALUE(at.contains(key) && at.at(key).isGenericDict(), "checkpoint '", path, "': ", where,
                   " is missing or not a dict (not a Lightning 2.x checkpoint's loops)");
    at = at.at(key).toGenericDict();
  }
  return at;
}

int64_t int_at(const StateDict& dict, const char* key, const std::string& where, const std::string& path) {
  LT_CHECK_VALUE(dict.contains(key) && dict.at(key).isInt(), "checkpoint '", path, "': ", where, ".", key,
                 " is missing or not an int");
  return dict.at(key).toInt();
}

}  // namespace

StateDict lightning_loops(const LoopsPosition& position, bool automatic_optimization) {
  const int64_t epoch = position.current_epoch;
  const int64_t step = position.global_step;
  StateDict fit = new_state_dict();
  fit.insert("state_dict", new_state_dict());
  StateDict epoch_state = new_state_dict();
  StateDict batches = new_state_dict();
  StateDict epochs = new_state_dict();
  if (position.epoch_finished) {  // on_train_epoch_end: the epoch processed, not yet completed
    batches = batch_progress(all(std::max<int64_t>(position.epoch_length, 0)), true);
    epochs = progress(Tracker::kProcessed, {epoch + 1, epoch + 1, epoch});
    epoch_state.insert("_batches_that_stepped", step);
  } else if (position.epoch_iteration > 0) {  // on_train_batch_end: that batch processed, not completed
    const int64_t n = position.epoch_iteration;
    batches = batch_progress({n, n, n - 1}, n == position.epoch_length);
    epochs = progress(Tracker::kProcessed, {epoch + 1, epoch, epoch});
    // Lightning counts the batch after on_train_batch_end; its restart adds it.
    epoch_state.insert("_batches_that_stepped", std::max<int64_t>(step - 1, 0));
  } else {  // before the epoch's first batch (as after fit): the epochs before it completed
    batches = batch_progress(all(0), false);
    epochs = progress(Tracker::kProcessed, all(epoch));
    epoch_state.insert("_batches_that_stepped", step);
  }
  fit.insert("epoch_loop.state_dict", epoch_state);
  fit.insert("epoch_loop.batch_progress", batches);
  fit.insert("epoch_loop.scheduler_progress", progress(Tracker::kReadyCompleted, all(0)));
  fit.insert("epoch_loop.automatic_optimization.state_dict", new_state_dict());
  StateDict optimizer = new_state_dict();
  optimizer.insert("step", progress(Tracker::kReadyCompleted, all(automatic_optimization ? step : 0)));
  optimizer.insert("zero_grad", progress(Tracker::kStarted, all(automatic_optimization ? step : 0)));
  StateDict optim_progress = new_state_dict();
  optim_progress.insert("optimizer", optimizer);
  fit.insert("epoch_loop.automatic_optimization.optim_progress", optim_progress);
  fit.insert("epoch_loop.manual_optimization.state_dict", new_state_dict());
  fit.insert("epoch_loop.manual_optimization.optim_step_progress",
             progress(Tracker::kReadyCompleted, all(automatic_optimization ? 0 : step)));
  fit.insert("epoch_loop.val_loop.state_dict", new_state_dict());
  fit.insert("epoch_loop.val_loop.batch_progress", batch_progress(all(0), false));
  fit.insert("epoch_progress", epochs);

  StateDict loops = new_state_dict();
  loops.insert("fit_loop", fit);
  loops.insert("validate_loop", evaluation_loop(true));
  loops.insert("test_loop", evaluation_loop(true));
  loops.insert("predict_loop", evaluation_loop(false));
  return loops;
}

LoopsPosition position_from_lightning_loops(const StateDict& loops, int64_t global_step, const std::string& path) {
  const StateDict epochs = dict_at(loops, {"fit_loop", "epoch_progress", "current"}, path);
  const std::string where = "loops.fit_loop.epoch_progress.current";
  const int64_t started = int_at(epochs, "started", where, path);
  const int64_t processed = int_at(epochs, "processed", where, path);
  const int64_t completed = int_at(epochs, "completed", where, path);
  LoopsPosition position;
  position.global_step = global_step;
  position.current_epoch = completed;
  if (processed > completed) {  // saved at an epoch's end (on_train_epoch_end, on_validation_end)
    position.epoch_finished = true;
  } else if (started > processed) {  // mid-epoch: the batches processed
    const StateDict batches = dict_at(loops, {"fit_loop", "epoch_loop.batch_progress", "current"}, path);
    position.epoch_iteration = int_at(batches, "processed", "loops.fit_loop.epoch_loop.batch_progress.current", path);
  }
  return position;
}

}  // namespace lt
