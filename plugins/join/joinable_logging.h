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
//   1. allreduce MAX of one value, n * kMaxValues + m (n = values reduced by
//      sum/mean, m = by min/max); a joined rank (or a padding micro-batch)
//      sends -1. Every rank learns the largest (n, m), N and M. (One value:
//      gloo reduces a one-element tensor in one exchange, a longer one in
//      several.) Skipped when every rank is known to run this micro-batch
//      (scheduled Join, before any rank ran out): N, M are this rank's own.
//   2. if N + M > 0: allreduce SUM of [v_1..v_N, c_1..c_N, e_1..e_M, a]:
//      a = 1 on an active rank, c_j / e_j = 1 where it has value j; a joined
//      rank sends zeros. mean = sum(v)/sum(c): over the active ranks only.
//      Every c and e must sum to a (every active rank logged the same
//      counts): otherwise every rank throws alike.
//   3. if M > 0: allreduce MAX of [v or -v]; a joined rank sends -inf.
// A sync_dist log outside a micro-batch (e.g. in on_train_batch_end) cannot
// be shadowed by a joined rank and is refused with an error.
//
// A rank shadowing a micro-batch (joined, or padding) gets the active ranks'
// reduced values too. Every active rank logs the same keys (2. checks it), so
// where their counts are those of the last micro-batch this rank logged
// itself, it records the values under those keys: the logging rank's metrics
// go on while it is joined, with the values of the ranks that still train.

#include <optional>
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
  // joined rank: neutral values, not counted. all_active: every rank runs
  // this micro-batch with the same logging (no header, step 1).
  void flush(bool padding = false, bool all_active = false);

  static constexpr int64_t kMaxValues = 4096;  // per micro-batch, of each kind

  void defer(ResultCollection::PendingSync pending) override;
  std::unique_ptr<JoinHook> join_hook() override;
  torch::Device join_device() const override { return device_; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return process_group_; }

 private:
  friend class LoggingJoinHook;
  // The collectives of one micro-batch (shadowing: a joined rank's, with
  // neutral values, `pending` the keys it expects). Returns the reduced values
  // in the order of `pending`, or nothing when shadowing and the active ranks'
  // counts are not those of `pending`.
  std::optional<std::vector<double>> reduce(const std::vector<ResultCollection::PendingSync>& pending,
                                            bool shadowing, bool all_active);
  // A shadowed micro-batch: the active ranks' values under last_logged_'s keys.
  void shadow(bool all_active);

  ResultCollection& results_;
  c10::intrusive_ptr<c10d::ProcessGroup> process_group_;
  torch::Device device_;
  std::vector<ResultCollection::PendingSync> pending_;
  // The keys (and options) of the last micro-batch this rank logged itself.
  std::vector<ResultCollection::PendingSync> last_logged_;
  bool open_ = false;
};

}  // namespace lt
