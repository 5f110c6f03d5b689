#pragma once
// log(..., sync_dist=true) in training_step under Join.
//
// While the training epoch runs under Join, sync_dist values are not reduced
// when logged: the DDP epoch context opens a micro-batch window (open()) and,
// when the micro-batch ends (after its backward and optimizer step), flush()
// reduces every value logged in it, in log order, so that a joined rank can
// shadow the same collectives in its main hook, after DDP's.
//
// Per micro-batch, in this order (all on the DDP process group):
//   1. allreduce MAX of [n, -n, m, -m]: n = values reduced by sum/mean,
//      m = values reduced by min/max; a joined rank sends [0, -inf, 0, -inf],
//      so every rank learns the active ranks' counts and whether they agree.
//   2. if n > 0: allreduce SUM of [v_1 .. v_n, c_1 .. c_n] with c = 1 on an
//      active rank, all zeros on a joined one. mean = sum(v)/sum(c): the mean
//      over the active ranks only; sum = sum(v).
//   3. if m > 0: allreduce MAX of [v or -v]; a joined rank sends -inf.
// A padding micro-batch (Join's window alignment) is neutral like a joined rank.
// Active ranks that logged different counts in one micro-batch all throw (so
// do the joined ranks): the reductions could not be matched.
// A sync_dist log outside a micro-batch (e.g. in on_train_batch_end) cannot
// be shadowed by a joined rank and is refused with an error.

#include <vector>

#include <lightning_cpp/core/result_collection.h>
#include <lightning_cpp/plugins/join/join.h>

namespace lt {

class LoggingJoinable : public Joinable, public ResultCollection::DeferredSync {
 public:
  // Attaches to `results` (deferred sync) until destroyed.
  LoggingJoinable(ResultCollection& results, c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                  torch::Device device = torch::kCPU);
  ~LoggingJoinable() override;

  void open() { open_ = true; }
  // Reduces the values logged since open() and records them; closes the
  // window. A padding micro-batch (no training_step) takes part like a
  // joined rank: neutral values, not counted.
  void flush(bool padding = false);

  void defer(ResultCollection::PendingSync pending) override;
  std::unique_ptr<JoinHook> join_hook() override;
  torch::Device join_device() const override { return device_; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return process_group_; }

 private:
  friend class LoggingJoinHook;
  // The collectives of one micro-batch (shadowing: a joined rank's, with
  // neutral values). Returns the reduced values in the order of `pending`.
  std::vector<double> reduce(const std::vector<ResultCollection::PendingSync>& pending, bool shadowing);

  ResultCollection& results_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  torch::Device device_;
  std::vector<ResultCollection::PendingSync> pending_;
  bool open_ = false;
};

}  // namespace lt
