#pragma once
// A stream (lt::IterableDataset) over the rows of a tensor pair, in order:
// what the tests compare with a map-style loader over the same rows.
//
// With DataLoader workers, worker w of W reads the rows of every W-th block
// of `block` rows (the blocks w, w + W, ...): with block = the batch size,
// the loader takes the workers' batches in turn and so gives the rows in
// their order, as without workers.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include <lightning_cpp/data/iterable_dataset.h>

namespace lt::testing {

class RowStream : public IterableDataset {
 public:
  // known: length() tells the number of rows; otherwise the length is unknown.
  RowStream(torch::Tensor x, torch::Tensor y, bool known = false, int64_t block = 1)
      : x_(std::move(x)), y_(std::move(y)), known_(known), block_(block) {}
  std::unique_ptr<ExampleStream> open(int64_t /*epoch*/, const StreamShard& shard) const override {
    return std::make_unique<Rows>(x_, y_, rows(shard));
  }
  std::optional<int64_t> length(const StreamShard& shard) const override {
    return known_ ? std::optional<int64_t>(rows(shard).size(0)) : std::nullopt;
  }

 private:
  // The indices of the rows that `shard`'s worker reads.
  torch::Tensor rows(const StreamShard& shard) const {
    const torch::Tensor all = torch::arange(x_.size(0));
    return all.masked_select(all.div(block_, "floor").remainder(shard.num_workers) == shard.worker);
  }
  struct Rows : ExampleStream {
    Rows(torch::Tensor x, torch::Tensor y, torch::Tensor rows) : x(std::move(x)), y(std::move(y)), rows(rows) {}
    std::optional<Batch> next() override {
      if (i >= rows.size(0)) return std::nullopt;
      const int64_t row = rows[i++].item<int64_t>();
      return Batch(x[row], y[row]);
    }
    torch::Tensor x, y, rows;
    int64_t i = 0;
  };
  torch::Tensor x_, y_;
  bool known_;
  int64_t block_;
};

}  // namespace lt::testing
