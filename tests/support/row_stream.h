#pragma once
// A stream (lt::IterableDataset) over the rows of a tensor pair, in order:
// what the tests compare with a map-style loader over the same rows.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include <lightning_cpp/data/iterable_dataset.h>

namespace lt::testing {

class RowStream : public IterableDataset {
 public:
  // known: length() tells the number of rows; otherwise the length is unknown.
  RowStream(torch::Tensor x, torch::Tensor y, bool known = false) : x_(std::move(x)), y_(std::move(y)), known_(known) {}
  std::unique_ptr<ExampleStream> open(int64_t /*epoch*/, const StreamShard& /*shard*/) const override {
    return std::make_unique<Rows>(x_, y_);
  }
  std::optional<int64_t> length(const StreamShard& /*shard*/) const override {
    return known_ ? std::optional<int64_t>(x_.size(0)) : std::nullopt;
  }

 private:
  struct Rows : ExampleStream {
    Rows(torch::Tensor x, torch::Tensor y) : x(std::move(x)), y(std::move(y)) {}
    std::optional<Batch> next() override {
      if (row >= x.size(0)) return std::nullopt;
      ++row;
      return Batch(x[row - 1], y[row - 1]);
    }
    torch::Tensor x, y;
    int64_t row = 0;
  };
  torch::Tensor x_, y_;
  bool known_;
};

}  // namespace lt::testing
