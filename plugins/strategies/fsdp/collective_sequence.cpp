#include <lightning_cpp/plugins/strategies/fsdp/collective_sequence.h>

#include <algorithm>

#include <lightning_cpp/core/check.h>

namespace lt {

CollectiveSequence::CollectiveSequence(std::vector<std::string> unit_names) : names_(std::move(unit_names)) {
  LT_INTERNAL_ASSERT(!names_.empty(), "CollectiveSequence over no unit");
}

void CollectiveSequence::start(bool reduces) {
  reduces_ = reduces;
  pos_ = 0;
  record_.clear();
}

void CollectiveSequence::record(UnitCollective c) {
  LT_INTERNAL_ASSERT(!known() && c.unit < names_.size(), "CollectiveSequence::record");
  record_.push_back(c);
}

void CollectiveSequence::mark_backward_start() {
  if (!known()) backward_start_ = record_.size();
}

int64_t CollectiveSequence::max_length() const {
  // Every unit's gathers in forward and backward and its reduction, twice over.
  return 8 * static_cast<int64_t>(names_.size()) + 8;
}

torch::Tensor CollectiveSequence::encode(bool has_record) const {
  const int64_t length = max_length();
  LT_CHECK(!has_record || static_cast<int64_t>(record_.size()) <= length, "strategy fsdp: a micro-batch ran ",
           record_.size(), " collectives over ", names_.size(), " units (more than ", length,
           "): is an lt::FSDPUnit called many times in one forward?");
  torch::Tensor t = torch::full({length + 2}, int64_t(-1), torch::kLong);
  if (!has_record) return t;
  auto* data = t.data_ptr<int64_t>();
  data[0] = static_cast<int64_t>(record_.size());
  data[1] = static_cast<int64_t>(backward_start_);
  const auto units = static_cast<int64_t>(names_.size());
  for (size_t i = 0; i < record_.size(); ++i) {
    data[2 + i] = static_cast<int64_t>(record_[i].op) * units + static_cast<int64_t>(record_[i].unit);
  }
  return t;
}

bool CollectiveSequence::adopt(const torch::Tensor& maxed) {
  const torch::Tensor t = maxed.to(torch::kCPU, torch::kLong).contiguous();
  LT_INTERNAL_ASSERT(t.numel() == max_length() + 2, "CollectiveSequence::adopt: ", t.numel(), " elements");
  const auto* data = t.data_ptr<int64_t>();
  // Every rank padded this micro-batch: none recorded, the sequence stays to be learned.
  if (data[0] < 0) return known();
  const auto units = static_cast<int64_t>(names_.size());
  backward_start_ = static_cast<size_t>(data[1]);
  sequence_.clear();
  for (int64_t i = 0; i < data[0]; ++i) {
    const int64_t code = data[2 + i];
    LT_INTERNAL_ASSERT(code >= 0 && code < 2 * units, "CollectiveSequence::adopt: code ", code);
    sequence_.push_back({static_cast<UnitOp>(code / units), static_cast<size_t>(code % units)});
  }
  return known();
}

std::string CollectiveSequence::describe(const UnitCollective& c) const {
  return c10::str(c.op == UnitOp::kGather ? "all_gather" : "reduce_scatter", " of unit '", names_.at(c.unit), "'");
}

void CollectiveSequence::expect(UnitCollective c) {
  LT_INTERNAL_ASSERT(known(), "CollectiveSequence::expect before the sequence is known");
  while (pos_ < sequence_.size() && !counted(sequence_[pos_])) ++pos_;
  if (pos_ >= sequence_.size() || !(sequence_[pos_] == c)) {
    const std::string expected = pos_ < sequence_.size() ? describe(sequence_[pos_]) : std::string("nothing more");
    throw Error(c10::str("strategy fsdp: this micro-batch's collective ", pos_ + 1, " is the ", describe(c),
                         " where every earlier micro-batch had the ", expected,
                         ": a rank with no data shadows the units' collectives in the order the first micro-batch ",
                         "ran them, so every micro-batch must run the same units in the same order (an lt::FSDPUnit ",
                         "called in a branch, or a parameter that gets a gradient only sometimes, changes it)"));
  }
  ++pos_;
}

std::optional<UnitCollective> CollectiveSequence::next() {
  while (pos_ < sequence_.size()) {
    const UnitCollective c = sequence_[pos_++];
    if (counted(c)) return c;
  }
  return std::nullopt;
}

std::optional<size_t> CollectiveSequence::next_gather() const {
  for (size_t i = pos_; i < sequence_.size(); ++i) {
    if (sequence_[i].op == UnitOp::kGather) return i;
  }
  return std::nullopt;
}

void CollectiveSequence::check_complete() const {
  if (!known()) return;
  const auto counted_in = [&](auto begin, auto end) {
    return std::count_if(begin, end, [&](const UnitCollective& c) { return counted(c); });
  };
  const auto expected = counted_in(sequence_.begin(), sequence_.end());
  const auto issued = counted_in(sequence_.begin(), sequence_.begin() + static_cast<std::ptrdiff_t>(pos_));
  LT_CHECK(issued == expected, "strategy fsdp: this micro-batch ran ", issued, " of its units' ", expected,
           " collectives: every micro-batch must run the same units in the same order");
}

}  // namespace lt
