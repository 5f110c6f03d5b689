#include <lightning_cpp/plugins/join/join.h>

#include <atomic>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <lightning_cpp/core/rank_zero.h>

namespace lt {

namespace {

// Blocking allreduce of a one-element float tensor; returns the reduced value.
double allreduce_scalar(c10d::ProcessGroup& pg, torch::Device device, float value) {
  std::vector<torch::Tensor> tensors{torch::full({1}, value, torch::TensorOptions().device(device))};
  auto work = pg.allreduce(tensors);
  work->wait();
  return tensors[0].item<double>();
}

}  // namespace

Join::Join(std::vector<Joinable*> joinables, bool enable, bool throw_on_early_termination,
           JoinSchedule schedule)
    : joinables_(std::move(joinables)),
      enable_(enable),
      throw_on_early_termination_(throw_on_early_termination),
      schedule_(std::move(schedule)) {
  LT_INTERNAL_ASSERT(!joinables_.empty(), "Join requires at least one joinable");
  for (Joinable* joinable : joinables_) {
    LT_CHECK(joinable != nullptr, "Join: a joinable is null");
    hooks_.push_back(joinable->join_hook());
  }
  // Process group and device: one process group for all joinables; the first joinable's device.
  process_group_ = joinables_.front()->join_process_group();
  device_ = joinables_.front()->join_device();
  LT_INTERNAL_ASSERT(process_group_, "Join: the first joinable has no process group");
  for (Joinable* joinable : joinables_) {
    LT_CHECK(joinable->join_process_group().get() == process_group_.get(),
             "Join: all joinables must use the same process group (using Join with multiple process groups)");
  }
  rank_ = process_group_->getRank();
  bool is_first_joinable = true;
  for (Joinable* joinable : joinables_) {
    joinable->set_join_config(
        JoinConfig{enable_, throw_on_early_termination_, is_first_joinable, schedule_ != nullptr});
    is_first_joinable = false;
  }
}

Join::~Join() {
  // Deliberately unlike PyTorch (which leaves the configs set after the
  // `with` block): once the context is gone, a joinable must not send
  // heartbeats, e.g. from DDP forwards in the validation that follows.
  for (Joinable* joinable : joinables_) joinable->set_join_config(JoinConfig{});
}

int64_t Join::num_nonjoined_procs() {
  // Matches the heartbeat allreduce(ones) of each active rank.
  return static_cast<int64_t>(allreduce_scalar(*process_group_, device_, 0.0f));
}

void Join::notify_procs_to_terminate() {
  // Matches the blocking allreduce(zeros) in notify_join_context on active ranks.
  allreduce_scalar(*process_group_, device_, 1.0f);
  throw EarlyTerminationError(c10::str("Rank ", rank_, " exhausted all inputs."));
}

void Join::join() {
  if (!enable_) return;
  static std::atomic<bool> warned{false};  // PyTorch: warnings.simplefilter("once")
  auto warn_skew = [&] {
    if (warned.exchange(true)) return;
    warn("Detected uneven input skew of greater than ", kWarnThreshold, ". This means that rank ", rank_,
         " has at least ", kWarnThreshold,
         " fewer inputs than other currently-active ranks. This level of skew could lead to performance "
         "degradation during training.");
  };
  if (schedule_) {
    int64_t shadowed = 0;
    for (; schedule_(); ++shadowed) {
      if (throw_on_early_termination_) throw EarlyTerminationError(c10::str("Rank ", rank_, " exhausted all inputs."));
      if (shadowed > kWarnThreshold) warn_skew();
      for (auto& hook : hooks_) hook->main_hook();
    }
    for (auto& hook : hooks_) hook->post_hook(/*is_last_joiner=*/shadowed == 0);
    return;
  }
  bool all_procs_joined = false;
  bool is_last_joiner = true;
  int64_t i = 0;
  while (!all_procs_joined) {
    if (i > kWarnThreshold) warn_skew();
    if (num_nonjoined_procs() == 0) {
      all_procs_joined = true;
    } else {
      if (throw_on_early_termination_) notify_procs_to_terminate();
      for (auto& hook : hooks_) hook->main_hook();
      is_last_joiner = false;
      ++i;
    }
  }
  for (auto& hook : hooks_) hook->post_hook(is_last_joiner);
}

c10::intrusive_ptr<c10d::Work> Join::notify_join_context(Joinable& joinable) {
  const JoinConfig& config = joinable.join_config();
  // Only the first joinable communicates for the context; a scheduled one not at all.
  if (!config.is_first_joinable || !config.enable || config.scheduled) return {};
  auto process_group = joinable.join_process_group();
  const torch::Device device = joinable.join_device();
  // The heartbeat: not waited here; DDP hands it to its reducer, whose
  // result (the number of active ranks) divides the gradients when
  // divide_by_initial_world_size is off.
  std::vector<torch::Tensor> ones{torch::ones({1}, torch::TensorOptions().device(device))};
  auto work = process_group->allreduce(ones);
  if (config.throw_on_early_termination) {
    if (allreduce_scalar(*process_group, device, 0.0f) != 0.0) {
      throw EarlyTerminationError("Detected at least one rank that exhausted inputs. Throwing across all ranks.");
    }
  }
  return work;
}

int64_t find_common_rank(const Joinable& joinable, bool candidate) {
  const auto group = joinable.join_process_group();
  std::vector<torch::Tensor> t{torch::full({1}, candidate ? int64_t(group->getRank()) : int64_t(-1),
                                           torch::TensorOptions().dtype(torch::kLong).device(joinable.join_device()))};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  group->allreduce(t, max)->wait();
  return t[0].item<int64_t>();
}

void broadcast_from_last_joiner(const Joinable& joinable, std::vector<torch::Tensor> tensors, bool is_last_joiner) {
  constexpr int64_t kBucketBytes = int64_t(250) * 1024 * 1024;  // DDP's broadcast bucket
  const int64_t last = find_common_rank(joinable, is_last_joiner);
  LT_CHECK(last != -1, "Join (rank ", joinable.join_process_group()->getRank(),
           "): no rank was the last to join; this is a bug in the Join bookkeeping");
  if (tensors.empty()) return;
  torch::NoGradGuard no_grad;
  c10d::broadcast_coalesced(joinable.join_process_group(), tensors, kBucketBytes, static_cast<int>(last));
}

}  // namespace lt

