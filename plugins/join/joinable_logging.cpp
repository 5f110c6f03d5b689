#include <lightning_cpp/plugins/join/joinable_logging.h>

#include <algorithm>
#include <limits>

namespace lt {

namespace {

bool is_extreme(ReduceOp op) { return op == ReduceOp::kMin || op == ReduceOp::kMax; }

torch::Tensor allreduce(c10d::ProcessGroup& pg, torch::Tensor t, c10d::ReduceOp::RedOpType op) {
  std::vector<torch::Tensor> tensors{std::move(t)};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  auto work = pg.allreduce(tensors, options);
  work->wait();
  return tensors[0].cpu();
}

}  // namespace

class LoggingJoinHook : public JoinHook {
 public:
  explicit LoggingJoinHook(LoggingJoinable& owner) : owner_(owner) {}
  void main_hook() override { owner_.shadow(/*all_active=*/false); }

 private:
  LoggingJoinable& owner_;
};

LoggingJoinable::LoggingJoinable(ResultCollection& results, c10::intrusive_ptr<c10d::ProcessGroup> process_group,
                                 torch::Device device)
    : results_(results), process_group_(std::move(process_group)), device_(device) {
  results_.set_deferred_sync(this);
}

LoggingJoinable::~LoggingJoinable() { results_.set_deferred_sync(nullptr); }

std::unique_ptr<JoinHook> LoggingJoinable::join_hook() { return std::make_unique<LoggingJoinHook>(*this); }

void LoggingJoinable::defer(ResultCollection::PendingSync pending) {
  LT_CHECK(open_, "log('", pending.name,
           "', sync_dist=true) outside training_step under Join (uneven_inputs: join): a rank that has joined "
           "cannot shadow this reduction. Log it from training_step, or with sync_dist=false");
  pending_.push_back(std::move(pending));
}

void LoggingJoinable::flush(bool padding, bool all_active) {
  open_ = false;
  std::vector<ResultCollection::PendingSync> pending;
  pending.swap(pending_);
  if (padding && pending.empty()) {
    shadow(all_active);
    return;
  }
  const std::vector<double> reduced = *reduce(pending, /*shadowing=*/false, all_active);
  for (size_t i = 0; i < pending.size(); ++i) results_.record_synced(pending[i], reduced[i]);
  if (!pending.empty()) last_logged_ = std::move(pending);
}

void LoggingJoinable::shadow(bool all_active) {
  if (const auto reduced = reduce(last_logged_, /*shadowing=*/true, all_active)) {
    for (size_t i = 0; i < last_logged_.size(); ++i) results_.record_synced(last_logged_[i], (*reduced)[i]);
  }
}

std::optional<std::vector<double>> LoggingJoinable::reduce(const std::vector<ResultCollection::PendingSync>& pending,
                                                           bool shadowing, bool all_active) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto dopts = torch::TensorOptions().dtype(torch::kDouble).device(device_);
  std::vector<size_t> sums;
  std::vector<size_t> extremes;
  for (size_t i = 0; i < pending.size(); ++i)
    (is_extreme(pending[i].options.reduce_fx()) ? extremes : sums).push_back(i);
  const auto n = static_cast<int64_t>(sums.size());
  const auto m = static_cast<int64_t>(extremes.size());
  LT_CHECK(n < kMaxValues && m < kMaxValues, "log(sync_dist=true) under Join: ", n, " sum/mean and ", m,
           " min/max values in one micro-batch; at most ", kMaxValues - 1, " of each");
  // 1. The header: the largest (n, m) of the active ranks.
  int64_t count = n;
  int64_t extreme_count = m;
  if (!all_active) {
    const double local = shadowing ? -1.0 : static_cast<double>(n * kMaxValues + m);
    const auto header = static_cast<int64_t>(
        allreduce(*process_group_, torch::full({1}, local, dopts), c10d::ReduceOp::MAX).item<double>());
    count = std::max<int64_t>(0, header) / kMaxValues;
    extreme_count = std::max<int64_t>(0, header) % kMaxValues;
  }
  // Shadowing: the values are the keys'' only if the active ranks logged as many.
  const bool matched = !shadowing || (count == n && extreme_count == m);
  std::vector<double> out(pending.size(), 0.0);
  if (count + extreme_count == 0) return matched ? std::optional<std::vector<double>>(out) : std::nullopt;
  // 2. Sums, and which rank has which value: [v_1..v_N, c_1..c_N, e_1..e_M, active].
  torch::Tensor payload = torch::zeros({2 * count + extreme_count + 1}, dopts);
  if (!shadowing) {
    for (int64_t j = 0; j < n; ++j) {
      payload[j] = pending[sums[j]].value;
      payload[count + j] = 1.0;
    }
    for (int64_t j = 0; j < m; ++j) payload[2 * count + j] = 1.0;
    payload[2 * count + extreme_count] = 1.0;
  }
  payload = allreduce(*process_group_, payload, c10d::ReduceOp::SUM);
  // The ranks that logged each value are the active ones, or some active rank
  // logged other values: every rank sees the same sums and throws alike.
  const torch::Tensor active = payload[2 * count + extreme_count];
  const bool agree = payload.slice(0, count, 2 * count + extreme_count).eq(active).all().item<bool>();
  LT_CHECK(agree, "log(sync_dist=true) under Join: the active ranks logged different numbers of synced values in "
           "one micro-batch (up to ", count, " sum/mean and ", extreme_count, " min/max values); every rank must log "
           "the same keys in training_step");
  for (int64_t j = 0; j < n && matched; ++j) {
    const double total = payload[j].item<double>();
    const double ranks = payload[count + j].item<double>();
    out[sums[j]] = pending[sums[j]].options.reduce_fx() == ReduceOp::kMean ? total / ranks : total;
  }
  // 3. Minima and maxima.
  if (extreme_count > 0) {
    torch::Tensor extreme = torch::full({extreme_count}, -kInf, dopts);
    for (int64_t j = 0; j < m && !shadowing; ++j) {
      const auto& p = pending[extremes[j]];
      extreme[j] = p.options.reduce_fx() == ReduceOp::kMax ? p.value : -p.value;
    }
    extreme = allreduce(*process_group_, extreme, c10d::ReduceOp::MAX);
    for (int64_t j = 0; j < m && matched; ++j) {
      const double v = extreme[j].item<double>();
      out[extremes[j]] = pending[extremes[j]].options.reduce_fx() == ReduceOp::kMax ? v : -v;
    }
  }
  if (!matched) return std::nullopt;
  return out;
}

}  // namespace lt
