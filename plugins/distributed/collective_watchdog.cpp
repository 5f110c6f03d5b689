#include <lightning_cpp/plugins/distributed/collective_watchdog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <vector>

#include <c10/util/Exception.h>

#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/signals.h>

namespace lt {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

std::string seconds_since(int64_t ns) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << static_cast<double>(now_ns() - ns) / 1e9 << " s";
  return os.str();
}

std::string to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

std::string one_line(std::string s) {
  for (char& c : s) c = c == '\n' ? ' ' : c;
  return s;
}

// A status line is "<kind> <epoch> <step> <batch> <batches>|<text>"; kinds:
constexpr const char* kInCollective = "collective";
constexpr const char* kOwnCode = "own_code";
constexpr const char* kFailed = "failed";                            // its own error
constexpr const char* kFailedInCollective = "failed_in_collective";  // it was in the collective
constexpr const char* kFinished = "finished";

struct Status {
  std::string kind, text;
  int64_t epoch = -1;
  bool present = false;
};

Status parse(const std::map<int64_t, std::string>& statuses, int64_t rank) {
  Status s;
  auto it = statuses.find(rank);
  if (it == statuses.end()) return s;
  const size_t bar = it->second.find('|');
  std::istringstream head(it->second.substr(0, bar));
  head >> s.kind >> s.epoch;
  s.text = bar == std::string::npos ? it->second : it->second.substr(bar + 1);
  s.present = true;
  return s;
}

}  // namespace

CollectiveWatchdog::Scope::Scope(CollectiveWatchdog* watchdog, const char* name)
    : watchdog_(watchdog), exceptions_(std::uncaught_exceptions()) {
  if (watchdog_ == nullptr) return;
  watchdog_->position();  // refreshes the position the thread reports
  watchdog_->since_ns_ = now_ns();
  outer_ = watchdog_->current_.exchange(name);
}

CollectiveWatchdog::Scope::~Scope() {
  if (watchdog_ == nullptr) return;
  const char* name = watchdog_->current_.exchange(outer_);
  if (std::uncaught_exceptions() > exceptions_ && watchdog_->failed_in_.empty() && name != nullptr) {
    watchdog_->failed_in_ = name;
  }
  watchdog_->last_ = name;
  watchdog_->since_ns_ = now_ns();
}

CollectiveWatchdog::CollectiveWatchdog(c10::intrusive_ptr<c10d::Store> store, int64_t rank, int64_t world_size,
                                       CollectiveWatchdogOptions options)
    : store_(std::move(store)), rank_(rank), world_size_(world_size), options_(options) {
  since_ns_ = now_ns();
  thread_ = std::thread([this] { watch_loop(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::begin_run(const RunState* state, bool join) {
  state_ = state;
  join_ = join;
  failed_in_.clear();
  stop_at_.reset();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cached_statuses_.clear();
    peer_failed_at_.reset();
    seen_stop_at_.reset();
  }
  run_ = runs_++;
}

void CollectiveWatchdog::end_run() {
  run_ = -1;
  state_ = nullptr;  // the Trainer that owns it may go before this strategy
}

std::string CollectiveWatchdog::key(const std::string& name) const {
  return c10::str("watchdog/", run_.load(), "/", name);
}

CollectiveWatchdog::Position CollectiveWatchdog::position() {
  // The main thread reads the run state and leaves a copy for the watchdog thread.
  if (const RunState* s = state_.load(); s != nullptr && std::this_thread::get_id() != thread_.get_id()) {
    epoch_ = s->current_epoch;
    step_ = s->global_step;
    batch_ = s->batch_idx;
    batches_ = s->num_training_batches;
  }
  return Position{epoch_.load(), step_.load(), batch_.load(), batches_.load()};
}

std::string CollectiveWatchdog::status_line(const char* failure, bool in_collective) {
  const Position p = position();
  const std::string where =
      c10::str("epoch ", p.epoch, ", global step ", p.step, ", batch ", p.batch, " of ", p.batches);
  const char* current = current_.load();
  const char* last = last_.load();
  std::string kind, text;
  if (failure != nullptr) {
    kind = in_collective ? kFailedInCollective : kFailed;
    text = c10::str("failed at ", where, ": ", failure);
  } else if (current != nullptr) {
    kind = kInCollective;
    text = c10::str("in ", current, " for ", seconds_since(since_ns_.load()), " (", where, ")");
  } else {
    kind = kOwnCode;
    text = c10::str("not in a collective for ", seconds_since(since_ns_.load()),
                    " (in its own code: a training step, a callback or data loading; ", where,
                    last != nullptr ? c10::str("; last collective: ", last) : std::string(), ")");
  }
  return c10::str(kind, " ", p.epoch, " ", p.step, " ", p.batch, " ", p.batches, "|", text);
}

void CollectiveWatchdog::publish(const std::string& status, bool unless_published) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (unless_published && cached_statuses_.count(rank_) != 0) return;
  cached_statuses_[rank_] = status;
  try {
    store_->set(key(c10::str("status/", rank_)), to_bytes(status));
  } catch (const std::exception&) {
    // The store is gone (its host, rank 0, ended): the report says who did not answer.
  }
}

std::map<int64_t, std::string> CollectiveWatchdog::statuses() {
  std::map<int64_t, std::string> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = cached_statuses_;
  }
  for (int64_t r = 0; r < world_size_; ++r) {
    try {
      const std::string k = key(c10::str("status/", r));
      if (store_->check({k})) out[r] = to_string(store_->get(k));
    } catch (const std::exception&) {
      break;  // unreachable store: keep what was cached
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [r, s] : out) cached_statuses_[r] = s;
  return out;
}

void CollectiveWatchdog::wait_for_statuses(std::chrono::milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  while (static_cast<int64_t>(statuses().size()) < world_size_ && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string format_watchdog_report(const std::string& headline, const std::map<int64_t, std::string>& statuses,
                                   int64_t rank, int64_t world_size, bool join,
                                   std::chrono::milliseconds report_wait) {
  std::ostringstream os;
  os << headline;
  std::vector<int64_t> failed, finished, elsewhere;
  for (int64_t r = 0; r < world_size; ++r) {
    const Status s = parse(statuses, r);
    os << "\n  rank " << r << ": ";
    if (!s.present) {
      os << "did not check in within " << report_wait.count() / 1000.0
         << " s (the process died, or cannot reach the store)";
    } else {
      os << s.text;
    }
    if (s.kind == kFinished) finished.push_back(r);
    if (!s.present || (s.kind != kInCollective && s.kind != kFailedInCollective)) elsewhere.push_back(r);
    if (r != rank && s.kind == kFailed) failed.push_back(r);
  }
  auto list = [](const std::vector<int64_t>& ranks) {
    std::string out;
    for (int64_t r : ranks) out += c10::str(out.empty() ? "" : ", ", r);
    return out;
  };
  if (!elsewhere.empty()) os << "\nranks that did not arrive: " << list(elsewhere);
  if (!failed.empty()) os << "\ncause: rank " << failed.front() << " failed (above); the others stopped with it";
  // Ranks still training in different epochs ran different numbers of batches.
  std::set<int64_t> epochs;
  for (int64_t r = 0; r < world_size; ++r) {
    const Status s = parse(statuses, r);
    if (s.present && s.kind != kFinished) epochs.insert(s.epoch);
  }
  const bool other_epoch = epochs.size() > 1;
  // Under Join, ranks that ran out of data wait in its shadowing; a rank in
  // another collective meanwhile issued one that no joinable shadows.
  std::vector<int64_t> joined, unshadowed;
  for (int64_t r = 0; r < world_size; ++r) {
    const Status s = parse(statuses, r);
    if (!s.present || (s.kind != kInCollective && s.kind != kFailedInCollective)) continue;
    (s.text.find(kJoinShadowingScope) != std::string::npos ? joined : unshadowed).push_back(r);
  }
  if (join && !joined.empty() && !unshadowed.empty()) {
    os << "\nlikely cause: uneven inputs: rank(s) " << list(joined) << " ran out of data and wait in Join, while "
       << "rank(s) " << list(unshadowed) << " are in a collective that no Join hook shadows (issued by a callback or "
       << "user code at a batch the joined ranks do not run); declare it in the callback's join_support so that the "
       << "check refuses it before the first step, issue it at an epoch end or in on_after_optimizer_step (lockstep "
       << "Join runs that on joined ranks), or use uneven_inputs: pad";
  } else if (join) {
    os << "\nuneven inputs are not the cause: Join handles them in this run";
  } else if (!finished.empty() || other_epoch) {
    os << "\nlikely cause: uneven inputs without Join: the ranks ran different numbers of batches"
       << (finished.empty() ? std::string(" (they are in different epochs)")
                            : c10::str(" (rank(s) ", list(finished), " finished while others still train)"))
       << "; use uneven_inputs: join (the default), or give every rank the same number of batches";
  } else if (failed.empty()) {
    os << "\nuneven inputs are not the likely cause: every rank that answered is in the same epoch";
  }
  return os.str();
}

std::string CollectiveWatchdog::report(const std::string& headline,
                                       const std::map<int64_t, std::string>& statuses) const {
  return format_watchdog_report(headline, statuses, rank_, world_size_, join_.load(), options_.report_wait());
}

std::exception_ptr CollectiveWatchdog::on_exception(const std::exception& e) {
  std::exception_ptr original = std::current_exception();
  if (run_ < 0) return original;
  if (dynamic_cast<const Interrupted*>(&e) != nullptr) {
    end_run();  // every rank stopped at the same step (agree_stop): nothing to report
    return original;
  }
  handling_ = true;
  const bool collective = !failed_in_.empty() && dynamic_cast<const Error*>(&e) == nullptr;
  const std::string what = one_line(error_message(e));
  const std::string failure = collective ? c10::str("in ", failed_in_, ": ", what) : what;
  publish(status_line(failure.c_str(), collective));
  try {
    store_->add(key("failed"), 1);
  } catch (const std::exception&) {
  }
  // Wait for the others' check-ins: they also learn of the failure before
  // this rank ends (and, if it is rank 0, takes the TCPStore with it).
  wait_for_statuses(options_.report_wait());
  const auto all = statuses();
  const Position p = position();
  end_run();
  handling_ = false;
  if (!collective) return original;
  bool peer_failed_first = false;
  for (const auto& entry : all) {
    peer_failed_first = peer_failed_first || (entry.first != rank_ && parse(all, entry.first).kind == kFailed);
  }
  if (peer_failed_first) {
    // Let the rank whose own error caused this exit first, so that a
    // launcher (which names the first worker to fail) names that rank.
    std::this_thread::sleep_for(options_.report_wait() / 4);
  }
  return std::make_exception_ptr(CollectiveError(
      report(c10::str("collective ", failed_in_, " failed on rank ", rank_, " of ", world_size_, " at epoch ", p.epoch,
                      ", global step ", p.step, ", batch ", p.batch, " (of ", p.batches, ") after the process ",
                      "group timeout of ", options_.timeout().count() / 1000.0, " s or a peer's failure: ", what),
             all)));
}

void CollectiveWatchdog::finish() {
  if (run_ < 0) return;
  handling_ = true;
  const Position p = position();
  publish(c10::str(kFinished, " ", p.epoch, " ", p.step, " ", p.batch, " ", p.batches, "|finished the run at epoch ",
                   p.epoch, ", global step ", p.step));
  // Polls a counter until it reaches the world size; false at the deadline.
  const auto wait_for_every_rank = [this](const std::string& counter, Clock::time_point deadline,
                                          bool watch_failures) {
    auto pause = std::chrono::milliseconds(1);
    while (store_->add(key(counter), 0) < world_size_) {
      if (watch_failures && store_->check({key("failed")})) return false;
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
    return true;
  };
  std::string headline;
  try {
    store_->add(key("finished"), 1);
    const auto deadline = Clock::now() + options_.timeout() + options_.report_wait();
    if (!wait_for_every_rank("finished", deadline, /*watch_failures=*/true)) {
      if (store_->check({key("failed")})) {
        wait_for_statuses(options_.report_wait());
        headline = c10::str("rank ", rank_, " of ", world_size_, " finished the run, but another rank failed");
      } else {
        headline = c10::str("rank ", rank_, " of ", world_size_, " finished the run, but not every rank did within ",
                            (options_.timeout() + options_.report_wait()).count() / 1000.0, " s");
      }
    } else {
      // Every rank finished. Each says it saw that and reads the store no
      // more in this run; the rank whose exit takes the store with it waits
      // for all of them, so no rank's last poll meets a closed store.
      store_->add(key("left"), 1);
      if (options_.hosts_store() &&
          !wait_for_every_rank("left", Clock::now() + options_.timeout(), /*watch_failures=*/false)) {
        warn("rank ", rank_, " of ", world_size_, " (the store's host): every rank finished the run, but not every ",
             "rank confirmed it within ", options_.timeout().count() / 1000.0, " s; leaving anyway");
      }
    }
  } catch (const std::exception& e) {
    // This rank's part is done; what is lost is only the word of the others'
    // end (the store's host left: a rank that failed says so in its own exit).
    warn("rank ", rank_, " of ", world_size_, " finished the run, but lost the store before every rank said it had ",
         "finished: ", one_line(error_message(e)), "; this rank's part succeeded (each rank's own exit status says ",
         "whether it did)");
  }
  const auto all = headline.empty() ? std::map<int64_t, std::string>{} : statuses();
  end_run();
  handling_ = false;
  if (!headline.empty()) throw CollectiveError(report(headline, all));
}

bool CollectiveWatchdog::agree_stop(bool local, int64_t step, bool lockstep, bool sync,
                                    std::optional<bool> reduced) {
  if (run_ < 0) return local;
  try {
    if (local && !stop_at_) {
      // The first proposal wins; compareSet returns the value in the store.
      // (Kept for lockstep windows without a reduction: the gradient
      // allreduce carries this rank's wish from its next backward on.)
      const std::string proposed = std::to_string(lockstep ? step + 1 : step);
      stop_at_ = std::stoll(to_string(store_->compareSet(key("stop_at"), {}, to_bytes(proposed))));
    }
    if (lockstep && reduced) {
      // Asked again at this step (a joined rank's finish()), the answer stays.
      if (*reduced) stop_at_ = std::min(stop_at_.value_or(step), step);
      return *reduced;
    }
    if (!stop_at_ && (lockstep || sync) && store_->check({key("stop_at")})) {
      stop_at_ = std::stoll(to_string(store_->get(key("stop_at"))));
    }
  } catch (const std::exception&) {
    return local;
  }
  if (!stop_at_) {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_at_ = seen_stop_at_;
  }
  if (!stop_at_) return false;
  return lockstep ? step >= *stop_at_ : true;
}

void CollectiveWatchdog::end_process(const std::string& headline) {
  publish(status_line(), /*unless_published=*/true);
  const std::string text = report(headline, statuses());
  std::fprintf(stderr, "%s: %s\n", program_name().c_str(), text.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(1);
}

void CollectiveWatchdog::watch_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, options_.poll(), [this] { return stopping_; })) {
    if (run_ < 0 || handling_) continue;
    lock.unlock();
    bool failed = false;
    std::optional<int64_t> stop_at;
    try {
      failed = store_->check({key("failed")});
      if (store_->check({key("stop_at")})) stop_at = std::stoll(to_string(store_->get(key("stop_at"))));
    } catch (const std::exception&) {
      // The store host ended; the main thread's collectives fail on their own.
    }
    const bool in_collective = current_.load() != nullptr;
    const auto open_for = std::chrono::nanoseconds(now_ns() - since_ns_.load());
    lock.lock();
    if (stop_at) seen_stop_at_ = stop_at;
    if (failed && !peer_failed_at_) {
      peer_failed_at_ = Clock::now();
      lock.unlock();
      publish(status_line(), /*unless_published=*/true);  // the check-in the failing rank waits for
      statuses();
      lock.lock();
    }
    if (run_ < 0 || handling_) continue;
    if (peer_failed_at_ && !in_collective && Clock::now() - *peer_failed_at_ > options_.grace()) {
      lock.unlock();
      end_process(c10::str("rank ", rank_, " of ", world_size_, " stops: another rank failed while this rank was ",
                           "busy in its own code for longer than ", options_.grace().count() / 1000.0, " s"));
    }
    if (in_collective && open_for > options_.timeout() + options_.report_wait() + options_.grace()) {
      lock.unlock();
      try {
        store_->add(key("failed"), 1);
      } catch (const std::exception&) {
      }
      end_process(c10::str("collective ", current_.load() != nullptr ? current_.load() : "?", " on rank ", rank_,
                           " of ", world_size_, " did not return within the process group timeout of ",
                           options_.timeout().count() / 1000.0, " s (the backend did not time it out)"));
    }
  }
}

}  // namespace lt
