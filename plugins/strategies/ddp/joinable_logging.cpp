#include <lightning_cpp/plugins/strategies/ddp/joinable_logging.h>

#include <cmath>
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
  void main_hook() override { owner_.reduce({}, /*shadowing=*/true); }

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

void LoggingJoinable::flush(bool padding) {
  open_ = false;
  std::vector<ResultCollection::PendingSync> pending;
  pending.swap(pending_);
  const std::vector<double> reduced = reduce(pending, /*shadowing=*/padding && pending.empty());
  for (size_t i = 0; i < pending.size(); ++i) results_.record_synced(pending[i], reduced[i]);
}

std::vector<double> LoggingJoinable::reduce(const std::vector<ResultCollection::PendingSync>& pending,
                                            bool shadowing) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto dopts = torch::TensorOptions().dtype(torch::kDouble).device(device_);
  std::vector<size_t> sums;
  std::vector<size_t> extremes;
  for (size_t i = 0; i < pending.size(); ++i)
    (is_extreme(pending[i].options.reduce_fx()) ? extremes : sums).push_back(i);
  const double n = static_cast<double>(sums.size());
  const double m = static_cast<double>(extremes.size());
  // A joined rank is neutral in the header: it does not count towards the minimum.
  torch::Tensor header =
      shadowing ? torch::tensor({0.0, -kInf, 0.0, -kInf}, dopts) : torch::tensor({n, -n, m, -m}, dopts);
  header = allreduce(*process_group_, header, c10d::ReduceOp::MAX);
  const double max_n = header[0].item<double>();
  const double min_n = -header[1].item<double>();
  const double max_m = header[2].item<double>();
  const double min_m = -header[3].item<double>();
  // min is +inf when every rank was neutral (joined or padding): nothing to reduce.
  const bool agree = (std::isinf(min_n) || max_n == min_n) && (std::isinf(min_m) || max_m == min_m);
  LT_CHECK(agree, "log(sync_dist=true) under Join: the active ranks logged different "
           "numbers of synced values in one micro-batch (sum/mean: ", min_n, " to ", max_n, ", min/max: ", min_m,
           " to ", max_m, "); every rank must log the same keys in training_step");
  std::vector<double> out(pending.size(), 0.0);
  if (max_n > 0) {
    const int64_t count = static_cast<int64_t>(max_n);
    torch::Tensor payload = torch::zeros({2 * count}, dopts);
    for (size_t j = 0; j < sums.size(); ++j) {
      payload[j] = pending[sums[j]].value;
      payload[count + j] = 1.0;
    }
    payload = allreduce(*process_group_, payload, c10d::ReduceOp::SUM);
    for (size_t j = 0; j < sums.size(); ++j) {
      const double total = payload[j].item<double>();
      const double ranks = payload[count + j].item<double>();
      out[sums[j]] = pending[sums[j]].options.reduce_fx() == ReduceOp::kMean ? total / ranks : total;
    }
  }
  if (max_m > 0) {
    const int64_t count = static_cast<int64_t>(max_m);
    torch::Tensor payload = torch::full({count}, -kInf, dopts);
    for (size_t j = 0; j < extremes.size(); ++j) {
      const auto& p = pending[extremes[j]];
      payload[j] = p.options.reduce_fx() == ReduceOp::kMax ? p.value : -p.value;
    }
    payload = allreduce(*process_group_, payload, c10d::ReduceOp::MAX);
    for (size_t j = 0; j < extremes.size(); ++j) {
      const double v = payload[j].item<double>();
      out[extremes[j]] = pending[extremes[j]].options.reduce_fx() == ReduceOp::kMax ? v : -v;
    }
  }
  return out;
}

}  // namespace lt
