#pragma once
// CollectiveWatchdog: no silent hang in a DDP run. Each rank notes, in
// memory, which collective it is in (a Scope around every collective the
// strategy issues) and where the loop is (epoch, global step, batch). When a
// run fails on one rank, the ranks check in through the c10d store, so that
// every rank can say what each rank was doing:
//
//   - a collective that fails on this rank (gloo's process_group_timeout,
//     a peer that died or left): on_exception() publishes this rank's status,
//     waits up to report_wait for the others' and returns a CollectiveError
//     naming the collective, the step, the batch, the ranks that did not
//     arrive and whether uneven inputs without Join are the likely cause;
//   - this rank's own error (a bad batch, an exception in user code):
//     on_exception() publishes it, waits for the others to see it, and keeps
//     the original exception; the others name it in their reports;
//   - a rank that is not in a collective when another failed (hung in its
//     own code): its watchdog thread answers the check-in and, if the main
//     thread has not ended the run after grace, prints the report and ends
//     the process (exit code 1);
//   - a backstop for backends whose collectives may block past their
//     timeout (NCCL without async error handling): a scope open longer than
//     timeout + grace ends the process the same way.
// It also ends each fit with a store barrier (finish()), so a rank that ran
// out of batches waits there, visibly, instead of leaving a peer alone in an
// allreduce (the store's host leaves it last: hosts_store), and carries the cross-rank agreement on where a signal stops
// training (agree_stop(), when the gradient allreduce cannot carry it).
//
// Store keys, under the strategy's process-group prefix and a run number that
// every rank advances alike (begin_run at each Trainer run):
//   watchdog/<run>/status/<rank>  this rank's status line
//   watchdog/<run>/failed         counter: > 0 once a rank failed
//   watchdog/<run>/finished       counter: ranks that finished the run
//   watchdog/<run>/left           counter: ranks that saw every rank finish (and no longer read the store)
//   watchdog/<run>/stop_at        the global step at which a signal stops every rank
// The watchdog thread polls only failed and stop_at (two store checks every
// poll); nothing is written to the store while training goes well.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <lightning_cpp/core/check.h>

namespace lt {

struct RunState;

// The scope a rank that ran out of data waits in while the others train (Join).
constexpr const char* kJoinShadowingScope = "Join (shadowing the ranks still training, final broadcast)";

// Replaces a collective's own error (a gloo timeout, a closed connection)
// with a report of every rank's part.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

struct CollectiveWatchdogOptions {
  // The process group's collective timeout.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::seconds(180);
  // How long a failing rank waits for the others' check-ins.
  TORCH_ARG(std::chrono::milliseconds, report_wait) = std::chrono::seconds(2);
  // How long a rank whose peer failed lets its main thread, busy in its own
  // code, reach the failure itself before the watchdog ends the process.
  TORCH_ARG(std::chrono::milliseconds, grace) = std::chrono::seconds(1);
  TORCH_ARG(std::chrono::milliseconds, poll) = std::chrono::milliseconds(100);
  // This rank hosts the store (rank 0's TCPStore under SLURM, MPI or a
  // manual launch): at finish() it leaves only after every rank has seen the
  // run's end, so that its exit fails no rank still reading the store.
  TORCH_ARG(bool, hosts_store) = false;
};

// The report every rank gives when a run fails: the headline, each rank's
// status line (`statuses`: rank -> "<kind> <epoch> <step> <batch> <batches>|<text>",
// kinds collective, own_code, failed, failed_in_collective, finished; a rank
// missing from it did not check in within `report_wait`), the ranks that did
// not arrive in the collective, and whether uneven inputs are the likely
// cause (`join`: the run trains under Join; then they are when some ranks wait
// in Join's shadowing while others are in a collective Join does not shadow).
// `rank` is the reporting rank.
std::string format_watchdog_report(const std::string& headline, const std::map<int64_t, std::string>& statuses,
                                   int64_t rank, int64_t world_size, bool join,
                                   std::chrono::milliseconds report_wait);

class CollectiveWatchdog {
 public:
  CollectiveWatchdog(c10::intrusive_ptr<c10d::Store> store, int64_t rank, int64_t world_size,
                     CollectiveWatchdogOptions options);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // A Trainer run starts (every rank calls it alike): `state` is where the
  // loop is; `join` says whether Join handles uneven inputs in this run.
  void begin_run(const RunState* state, bool join);
  // The run is over (after finish() or on_exception()).
  void end_run();
  bool in_run() const { return run_ >= 0; }

  // Marks the collective `name` (a string literal) as running on this rank.
  // Scopes nest: an inner one (a callback's collective while a joined rank
  // shadows) replaces the outer one until it ends, and the outer one then
  // counts as open since that moment.
  class Scope {
   public:
    Scope() = default;
    Scope(CollectiveWatchdog* watchdog, const char* name);
    Scope(Scope&& other) noexcept
        : watchdog_(other.watchdog_), outer_(other.outer_), exceptions_(other.exceptions_) {
      other.watchdog_ = nullptr;
    }
    Scope& operator=(Scope&&) = delete;
    ~Scope();

   private:
    CollectiveWatchdog* watchdog_ = nullptr;
    const char* outer_ = nullptr;
    int exceptions_ = 0;
  };
  Scope watch(const char* name) { return Scope(this, name); }

  // The run failed on this rank with `e` (call it from the catch block: the
  // original is std::current_exception()). Returns what to throw instead.
  std::exception_ptr on_exception(const std::exception& e);

  // The end of a fit on every rank: returns once all ranks got here; throws
  // CollectiveError when a rank failed or did not arrive in time. The end is
  // agreed, not raced: the rank that hosts the store returns last, and a
  // store lost after this rank's own success is a warning, not an error.
  void finish();

  // Where a signal stops training, agreed by every rank. `local`: this rank
  // got a signal. `lockstep`: the ranks run the same steps (no Join, or
  // scheduled Join); `reduced`: what this window's gradient allreduce carried
  // (DistributedDataParallel::take_agreed_stop), the same on every rank, so
  // it decides. A lockstep window without one (no backward reduced
  // gradients) sets the stop one step ahead in the store and reads it at
  // every such call. Otherwise (Join) a rank may stop at once and the others
  // learn of it from the watchdog thread, or from the store when `sync` is
  // set (epoch end).
  bool agree_stop(bool local, int64_t step, bool lockstep, bool sync, std::optional<bool> reduced = std::nullopt);

 private:
  struct Position {
    int64_t epoch = 0, step = 0, batch = 0, batches = 0;
  };
  Position position();  // the main thread refreshes it from the run state
  std::string key(const std::string& name) const;
  // This rank's status line; `failure`: this rank failed with it (`in_collective`: in a collective).
  std::string status_line(const char* failure = nullptr, bool in_collective = false);
  // Writes this rank's status (`unless_published`: keeps one already written this run).
  void publish(const std::string& status, bool unless_published = false);
  // Every rank's status (read now, merged with what the thread cached).
  std::map<int64_t, std::string> statuses();
  std::string report(const std::string& headline, const std::map<int64_t, std::string>& statuses) const;
  void wait_for_statuses(std::chrono::milliseconds wait);
  void watch_loop();
  [[noreturn]] void end_process(const std::string& headline);

  c10::intrusive_ptr<c10d::Store> store_;
  int64_t rank_;
  int64_t world_size_;
  CollectiveWatchdogOptions options_;

  // Written by the main thread, read by the watchdog thread.
  std::atomic<int64_t> run_{-1};
  int64_t runs_ = 0;
  std::atomic<const RunState*> state_{nullptr};
  std::atomic<bool> join_{false};
  std::atomic<const char*> current_{nullptr};  // the open scope's collective
  std::atomic<const char*> last_{nullptr};     // the last collective that ended
  std::atomic<int64_t> since_ns_{0};           // when current_ opened or last_ ended
  std::atomic<int64_t> epoch_{0}, step_{0}, batch_{0}, batches_{0};  // position when since_ns_ was set
  std::atomic<bool> handling_{false};          // the main thread is in on_exception/finish
  std::string failed_in_;                      // the collective an exception left (main thread)
  std::optional<int64_t> stop_at_;             // main thread

  std::mutex mutex_;  // guards the members below
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<int64_t, std::string> cached_statuses_;
  std::optional<std::chrono::steady_clock::time_point> peer_failed_at_;
  std::optional<int64_t> seen_stop_at_;
  std::thread thread_;
};

}  // namespace lt
