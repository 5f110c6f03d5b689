#include <lightning_cpp/plugins/distributed/collectives.h>

#include <algorithm>
#include <cstring>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/distributed/collective_watchdog.h>

namespace lt {

torch::Tensor WatchedCollectives::reduce(const torch::Tensor& tensor, ReduceOp op) const {
  torch::Tensor t = tensor.detach().to(device).clone().contiguous();
  if (op == ReduceOp::kMean && !t.is_floating_point()) t = t.to(torch::kDouble);
  c10d::AllreduceOptions opts;
  opts.reduceOp = op == ReduceOp::kMin ? c10d::ReduceOp::MIN : op == ReduceOp::kMax ? c10d::ReduceOp::MAX
                                                                                     : c10d::ReduceOp::SUM;
  std::vector<torch::Tensor> tensors{t};
  CollectiveWatchdog::Scope scope(watchdog, "allreduce (strategy reduce)");
  group->allreduce(tensors, opts)->wait();
  if (op == ReduceOp::kMean) t.div_(static_cast<double>(group->getSize()));
  return t.to(tensor.device());
}

torch::Tensor WatchedCollectives::all_gather(const torch::Tensor& tensor) const {
  const int64_t world_size = group->getSize();
  torch::Tensor t = tensor.detach().to(device).contiguous();
  // Shapes first: a mismatch is an error on every rank instead of a hang.
  constexpr int64_t kMaxDims = 8;
  torch::Tensor shape = torch::full({kMaxDims + 1}, -1, torch::TensorOptions().dtype(torch::kLong));
  shape[0] = t.dim() <= kMaxDims ? t.dim() : -1;
  for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kMaxDims); ++d) shape[d + 1] = t.size(d);
  shape = shape.to(device);
  std::vector<std::vector<torch::Tensor>> shapes_out(1);
  for (int64_t r = 0; r < world_size; ++r) shapes_out[0].push_back(torch::empty_like(shape));
  std::vector<torch::Tensor> shape_in{shape};
  CollectiveWatchdog::Scope scope(watchdog, "allgather (strategy all_gather)");
  group->allgather(shapes_out, shape_in)->wait();
  for (int64_t r = 0; r < world_size; ++r) {
    LT_CHECK(shapes_out[0][r][0].item<int64_t>() >= 0 && shapes_out[0][r].equal(shape), owner,
             ": all_gather needs the same shape (at most ", kMaxDims, " dimensions) on every rank; rank ",
             group->getRank(), " has ", t.sizes(), ", rank ", r, " differs");
  }
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int64_t r = 0; r < world_size; ++r) out[0].push_back(torch::empty_like(t));
  std::vector<torch::Tensor> in{t};
  group->allgather(out, in)->wait();
  return torch::stack(out[0]).to(tensor.device());
}

std::vector<std::string> WatchedCollectives::all_gather_bytes(const std::string& bytes) const {
  // The sizes, then every rank's bytes padded to the longest.
  const torch::Tensor sizes = all_gather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong)).flatten();
  const int64_t longest = std::max<int64_t>(1, sizes.max().item<int64_t>());  // gloo: no empty tensors
  torch::Tensor mine = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
  const torch::Tensor all = all_gather(mine).cpu().contiguous();
  std::vector<std::string> out;
  for (int64_t r = 0; r < sizes.size(0); ++r) {
    const auto* data = static_cast<const char*>(all[r].data_ptr());
    out.emplace_back(data, static_cast<size_t>(sizes[r].item<int64_t>()));
  }
  return out;
}

torch::Tensor WatchedCollectives::broadcast(const torch::Tensor& tensor, int64_t src) const {
  LT_CHECK(src >= 0 && src < group->getSize(), owner, ": broadcast from rank ", src, " but the world size is ",
           group->getSize());
  torch::Tensor t = tensor.detach().to(device).clone().contiguous();
  c10d::BroadcastOptions opts;
  opts.rootRank = src;
  std::vector<torch::Tensor> tensors{t};
  CollectiveWatchdog::Scope scope(watchdog, "broadcast (strategy broadcast)");
  group->broadcast(tensors, opts)->wait();
  return t.to(tensor.device());
}

void WatchedCollectives::barrier() const {
  CollectiveWatchdog::Scope scope(watchdog, "barrier");
  group->barrier()->wait();
}

bool WatchedCollectives::reduce_boolean_decision(bool decision, bool all) const {
  const int64_t sum = reduce(torch::tensor({decision ? 1 : 0}, torch::kLong), ReduceOp::kSum).item<int64_t>();
  return all ? sum == group->getSize() : sum > 0;
}

}  // namespace lt
