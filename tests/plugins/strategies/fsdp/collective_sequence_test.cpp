// CollectiveSequence (plugins/strategies/fsdp/collective_sequence.h): the
// order of a micro-batch's unit collectives, learned from one micro-batch,
// shared between ranks, then held to and replayed. Pure bookkeeping: the
// ranks' sharing is the elementwise MAX a collective would compute.

#include <gtest/gtest.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/strategies/fsdp/collective_sequence.h>

namespace {

using lt::CollectiveSequence;
using lt::UnitCollective;
using lt::UnitOp;

constexpr UnitCollective G(size_t u) { return {UnitOp::kGather, u}; }
constexpr UnitCollective R(size_t u) { return {UnitOp::kReduce, u}; }

// A FULL_SHARD micro-batch over units a, b: gathers in forward, b's gather in
// backward, then the reductions.
const std::vector<UnitCollective> kMicroBatch{G(0), G(1), G(1), R(1), G(0), R(0)};
constexpr size_t kBackwardStart = 2;

CollectiveSequence learned() {
  CollectiveSequence s({"a", "b"});
  s.start(/*reduces=*/true);
  for (size_t i = 0; i < kMicroBatch.size(); ++i) {
    if (i == kBackwardStart) s.mark_backward_start();
    s.record(kMicroBatch[i]);
  }
  return s;
}

// What two ranks' MAX allreduce gives: `a` recorded, `b` joined (no record).
torch::Tensor shared(const CollectiveSequence& a, const CollectiveSequence& b) {
  return torch::maximum(a.encode(/*has_record=*/true), b.encode(/*has_record=*/false));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const lt::Error& e) {
    return e.what();
  }
  return "";
}

TEST(CollectiveSequence, ARecordSharedWithARankWithoutOneBecomesEveryRanksSequence) {
  CollectiveSequence recorded = learned(), joined({"a", "b"});
  EXPECT_FALSE(recorded.known());
  const torch::Tensor maxed = shared(recorded, joined);
  EXPECT_TRUE(recorded.adopt(maxed));
  EXPECT_TRUE(joined.adopt(maxed));
  EXPECT_EQ(recorded.collectives(), kMicroBatch);
  EXPECT_EQ(joined.collectives(), kMicroBatch);
}

TEST(CollectiveSequence, WithoutAnyRecordItStaysToBeLearned) {
  CollectiveSequence a({"a", "b"}), b({"a", "b"});
  EXPECT_FALSE(a.adopt(torch::maximum(a.encode(false), b.encode(false))));
  EXPECT_TRUE(a.collectives().empty());
}

TEST(CollectiveSequence, TheSameOrderPassesAndCompletes) {
  CollectiveSequence s = learned();
  s.adopt(shared(s, s));
  s.start(true);
  for (const auto& c : kMicroBatch) s.expect(c);
  EXPECT_NO_THROW(s.check_complete());
}

TEST(CollectiveSequence, AnotherOrderIsAnErrorNamingBothCollectives) {
  CollectiveSequence s = learned();
  s.adopt(shared(s, s));
  s.start(true);
  s.expect(G(0));
  const std::string what = error_of([&] { s.expect(G(0)); });
  EXPECT_NE(what.find("collective 2 is the all_gather of unit 'a'"), std::string::npos) << what;
  EXPECT_NE(what.find("had the all_gather of unit 'b'"), std::string::npos) << what;
}

TEST(CollectiveSequence, AMicroBatchThatStopsShortIsIncomplete) {
  CollectiveSequence s = learned();
  s.adopt(shared(s, s));
  s.start(true);
  s.expect(G(0));
  s.expect(G(1));
  const std::string what = error_of([&] { s.check_complete(); });
  EXPECT_NE(what.find("ran 2 of its units' 6 collectives"), std::string::npos) << what;
}

TEST(CollectiveSequence, UnderNoSyncTheReductionsAreSkipped) {
  CollectiveSequence s = learned();
  s.adopt(shared(s, s));
  s.start(/*reduces=*/false);
  for (const auto& c : kMicroBatch) {
    if (c.op == UnitOp::kGather) s.expect(c);
  }
  EXPECT_NO_THROW(s.check_complete());
  s.start(false);
  EXPECT_FALSE(error_of([&] { s.expect(R(1)); }).empty()) << "a reduction under no_sync was accepted";
}

TEST(CollectiveSequence, AReplayTakesTheRestFromWhereTheMicroBatchIs) {
  CollectiveSequence s = learned();
  s.adopt(shared(s, s));
  s.start(true);
  s.expect(G(0));  // a padding micro-batch's forward ran this much
  std::vector<UnitCollective> rest;
  while (const auto c = s.next()) rest.push_back(*c);
  EXPECT_EQ(rest, std::vector<UnitCollective>(kMicroBatch.begin() + 1, kMicroBatch.end()));
  s.start(false);
  rest.clear();
  while (const auto c = s.next()) rest.push_back(*c);
  EXPECT_EQ(rest, (std::vector<UnitCollective>{G(0), G(1), G(1), G(0)}));
}

TEST(CollectiveSequence, PrefetchSeesBackwardAndTheNextGather) {
  CollectiveSequence s = learned();
  s.adopt(shared(s, s));
  s.start(true);
  s.expect(G(0));
  s.expect(G(1));
  EXPECT_FALSE(s.in_backward());  // the forward's gathers
  s.expect(G(1));
  EXPECT_TRUE(s.in_backward());
  ASSERT_TRUE(s.next_gather().has_value());
  EXPECT_EQ(*s.next_gather(), 4u);  // G(0), after R(1)
  s.expect(R(1));
  s.expect(G(0));
  EXPECT_FALSE(s.next_gather().has_value());
}

TEST(CollectiveSequence, ARecordLongerThanTheLimitIsRefused) {
  CollectiveSequence s({"a"});
  s.start(true);
  for (int64_t i = 0; i <= s.max_length(); ++i) s.record(G(0));
  const std::string what = error_of([&] { s.encode(true); });
  EXPECT_NE(what.find("called many times in one forward"), std::string::npos) << what;
}

}  // namespace
