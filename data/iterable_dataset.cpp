#include <lightning_cpp/data/iterable_dataset.h>

#include <algorithm>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

// Reads `pieces` one after another, each opened as the epoch's stream and
// skipped to its begin.
class PiecesStream : public ExampleStream {
 public:
  PiecesStream(std::shared_ptr<const IterableDataset> dataset, int64_t epoch, StreamShard layout,
               std::vector<StreamRemainder::Piece> pieces)
      : dataset_(std::move(dataset)), epoch_(epoch), layout_(layout), pieces_(std::move(pieces)) {}

  std::optional<Batch> next() override {
    while (at_ < pieces_.size()) {
      const StreamRemainder::Piece& piece = pieces_[at_];
      if (!stream_) {
        const StreamShard shard{piece.stream / layout_.num_workers, layout_.num_replicas,
                                piece.stream % layout_.num_workers, layout_.num_workers};
        stream_ = dataset_->open(epoch_, shard);
        LT_CHECK(stream_ != nullptr, "IterableDataset::open returned no stream (epoch ", epoch_, ", rank ", shard.rank,
                 ", worker ", shard.worker, ")");
        const int64_t skipped = stream_->skip(piece.begin);
        LT_CHECK_VALUE(skipped == piece.begin, "the rest of epoch ", epoch_, " starts at example ", piece.begin,
                       " of the stream of rank ", shard.rank, " (worker ", shard.worker, " of ", shard.num_workers,
                       ") as its run opened it, but that stream ends after ", skipped,
                       " examples: a stream resumed on another world size must give the same examples again");
        read_ = piece.begin;
      }
      if (read_ < piece.end) {
        std::optional<Batch> example = stream_->next();
        LT_CHECK_VALUE(example.has_value(), "the rest of epoch ", epoch_, " reads examples [", piece.begin, ", ",
                       piece.end, ") of the stream ", piece.stream, " of ", layout_.count(),
                       " as its run opened them, but that stream ends after ", read_,
                       " (shorter than IterableDataset::length said)");
        ++read_;
        return example;
      }
      stream_.reset();
      ++at_;
    }
    return std::nullopt;
  }

 private:
  std::shared_ptr<const IterableDataset> dataset_;
  int64_t epoch_;
  StreamShard layout_;
  std::vector<StreamRemainder::Piece> pieces_;
  size_t at_ = 0;
  std::unique_ptr<ExampleStream> stream_;
  int64_t read_ = 0;
};

}  // namespace

StreamRemainder::StreamRemainder(std::shared_ptr<const IterableDataset> dataset, int64_t epoch, StreamShard layout,
                                 std::vector<Piece> pieces)
    : dataset_(std::move(dataset)), epoch_(epoch), layout_(layout), pieces_(std::move(pieces)) {
  LT_CHECK(dataset_ != nullptr && layout_.count() > 0, "StreamRemainder: no dataset or no streams");
  for (const Piece& piece : pieces_) {
    LT_CHECK_VALUE(piece.stream >= 0 && piece.stream < layout_.count() && piece.begin >= 0 && piece.begin <= piece.end,
                   "the rest of epoch ", epoch_, ": examples [", piece.begin, ", ", piece.end, ") of stream ",
                   piece.stream, " of ", layout_.count(), " is not a piece of the epoch's streams");
    total_ += piece.end - piece.begin;
  }
}

std::vector<StreamRemainder::Piece> StreamRemainder::slice(const StreamShard& shard) const {
  const int64_t first = total_ * shard.index() / shard.count(), last = total_ * (shard.index() + 1) / shard.count();
  std::vector<Piece> mine;
  int64_t at = 0;  // where the piece starts in the rest
  for (const Piece& piece : pieces_) {
    const int64_t begin = std::max(first, at), end = std::min(last, at + piece.end - piece.begin);
    if (begin < end) mine.push_back({piece.stream, piece.begin + begin - at, piece.begin + end - at});
    at += piece.end - piece.begin;
  }
  return mine;
}

int64_t StreamRemainder::length(const StreamShard& shard) const {
  return total_ * (shard.index() + 1) / shard.count() - total_ * shard.index() / shard.count();
}

std::unique_ptr<ExampleStream> StreamRemainder::open(const StreamShard& shard) const {
  return std::make_unique<PiecesStream>(dataset_, epoch_, layout_, slice(shard));
}

}  // namespace lt
