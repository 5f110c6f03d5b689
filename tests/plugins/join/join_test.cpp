// plugins/join/join.h: the Join protocol with simple joinables (PyTorch's
// test_join.py, in C++): main hooks shadow the active ranks' collectives, one
// heartbeat, the post hooks and the last joiners, throw_on_early_termination
// and the skew warning, in real worker processes over Gloo.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/core/torch_compat.h>
#include <lightning_cpp/plugins/join/join.h>

#include "plugins/join/join_fixture.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

namespace {

// The process group of a worker, from the torchrun-style environment.
c10::intrusive_ptr<c10d::ProcessGroup> make_process_group(std::chrono::seconds timeout = std::chrono::seconds(20)) {
  const int rank = env_int("RANK");
  const int world_size = env_int("WORLD_SIZE");
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(env_int("MASTER_PORT"));
  store_options.isServer = rank == 0;
  store_options.numWorkers = world_size;
  store_options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
  return lt::compat::process_group_of(c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options),
                                      store, rank, world_size, false);
}

// PyTorch's test_join.py AllReducer: each iteration allreduces ones
// `num_allreduces` times; a joined rank's hook shadows with zeros, so each
// result counts the active ranks. Its post hook broadcasts a value from the
// last joiner with the highest rank.
class AllReducer : public lt::Joinable {
 public:
  static constexpr double kBefore = 41;
  static constexpr double kAfter = 42;

  AllReducer(c10::intrusive_ptr<c10d::ProcessGroup> pg, int num_allreduces)
      : pg_(std::move(pg)), num_allreduces_(num_allreduces) {}

  // One iteration of an active rank; returns the sum of the allreduce results.
  double step() {
    auto heartbeat = lt::Join::notify_join_context(*this);
    double total = 0;
    for (int i = 0; i < num_allreduces_; ++i) total += allreduce_value(*pg_, 1.0);
    if (heartbeat) heartbeat->wait();
    heartbeats_ += heartbeat ? 1 : 0;
    return total;
  }

  class Hook : public lt::JoinHook {
   public:
    explicit Hook(AllReducer& owner) : owner_(owner) {}
    void main_hook() override {
      for (int i = 0; i < owner_.num_allreduces_; ++i) allreduce_value(*owner_.pg_, 0.0);
      ++owner_.main_hook_calls_;
    }
    void post_hook(bool is_last_joiner) override {
      owner_.is_last_joiner_ = is_last_joiner;
      const double src = allreduce_value(*owner_.pg_, is_last_joiner ? owner_.pg_->getRank() : -1,
                                         c10d::ReduceOp::MAX);
      std::vector<torch::Tensor> t{torch::full({1}, is_last_joiner ? kAfter : kBefore, torch::kDouble)};
      c10d::BroadcastOptions options;
      options.rootRank = static_cast<int>(src);
      owner_.pg_->broadcast(t, options)->wait();
      owner_.post_value_ = t[0].item<double>();
      ++owner_.post_hook_calls_;
    }

   private:
    AllReducer& owner_;
  };

  std::unique_ptr<lt::JoinHook> join_hook() override { return std::make_unique<Hook>(*this); }
  torch::Device join_device() const override { return torch::kCPU; }
  c10::intrusive_ptr<c10d::ProcessGroup> join_process_group() const override { return pg_; }

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  int num_allreduces_;
  int64_t heartbeats_ = 0;
  int64_t main_hook_calls_ = 0;
  int64_t post_hook_calls_ = 0;
  bool is_last_joiner_ = false;
  double post_value_ = 0;
};

// Inputs of each rank, from "n0,n1,..." in JOIN_INPUTS.
std::vector<int> inputs_per_rank() {
  std::vector<int> out;
  std::stringstream ss(env_str("JOIN_INPUTS"));
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

// -- Join with simple joinables (PyTorch's test_join.py, in C++) --------------------------------

LT_TEST_WORKER(JoinAllReducer) {
  auto pg = make_process_group();
  const int rank = pg->getRank();
  const std::vector<int> inputs = inputs_per_rank();
  const int num_joinables = env_int("JOIN_NUM_JOINABLES", 1);
  const int num_allreduces = env_int("JOIN_NUM_ALLREDUCES", 1);
  const bool enable = env_int("JOIN_ENABLE", 1) != 0;
  std::vector<std::unique_ptr<AllReducer>> reducers;
  std::vector<lt::Joinable*> joinables;
  for (int j = 0; j < num_joinables; ++j) {
    reducers.push_back(std::make_unique<AllReducer>(pg, num_allreduces));
    joinables.push_back(reducers.back().get());
  }
  double total = 0;
  {
    lt::Join join(joinables, enable);
    for (int i = 0; i < inputs[rank]; ++i) {
      for (auto& r : reducers) total += r->step();
    }
    join.join();
  }
  // Each allreduce of iteration i sums the ranks that still have input i.
  double expected = 0;
  for (int i = 0; i < inputs[rank]; ++i) {
    expected += static_cast<double>(std::count_if(inputs.begin(), inputs.end(), [&](int n) { return n > i; }));
  }
  expected *= num_joinables * num_allreduces;
  LT_WORKER_CHECK(total == expected);
  const int max_inputs = *std::max_element(inputs.begin(), inputs.end());
  for (size_t j = 0; j < reducers.size(); ++j) {
    const AllReducer& r = *reducers[j];
    // Only the first joinable sends the heartbeat.
    LT_WORKER_CHECK(r.heartbeats_ == (enable && j == 0 ? inputs[rank] : 0));
    if (!enable) {
      LT_WORKER_CHECK(r.post_hook_calls_ == 0);
      continue;
    }
    LT_WORKER_CHECK(r.main_hook_calls_ == max_inputs - inputs[rank]);
    LT_WORKER_CHECK(r.post_hook_calls_ == 1);
    LT_WORKER_CHECK(r.is_last_joiner_ == (inputs[rank] == max_inputs));
    LT_WORKER_CHECK(r.post_value_ == AllReducer::kAfter);
    // The config is reset when the context ends.
    LT_WORKER_CHECK(!r.join_config().enable);
  }
  return 0;
}

TEST(Join, MainHooksShadowEveryIterationOfTheActiveRanks) {
  auto r = run_workers("JoinAllReducer", 4, join_options("0,3,5,9", {{"JOIN_NUM_ALLREDUCES", "2"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Join, OnlyTheFirstJoinableSendsTheHeartbeat) {
  auto r = run_workers("JoinAllReducer", 3, join_options("4,7,2", {{"JOIN_NUM_JOINABLES", "3"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Join, PostHookRunsOnEveryRankWithTheLastJoinersFlagged) {
  // Two last joiners: the broadcast comes from the higher one.
  auto r = run_workers("JoinAllReducer", 3, join_options("6,2,6"));
  EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(Join, DisabledJoinIsTransparentOnEvenInputs) {
  auto r = run_workers("JoinAllReducer", 2, join_options("5,5", {{"JOIN_ENABLE", "0"}}));
  EXPECT_TRUE(r.ok()) << r.summary();
}

LT_TEST_WORKER(JoinThrowOnEarlyTermination) {
  auto pg = make_process_group();
  const int rank = pg->getRank();
  const std::vector<int> inputs = inputs_per_rank();
  const int min_inputs = *std::min_element(inputs.begin(), inputs.end());
  AllReducer reducer(pg, 1);
  int iterations = 0;
  try {
    lt::Join join({&reducer}, /*enable=*/true, /*throw_on_early_termination=*/true);
    for (int i = 0; i < inputs[rank]; ++i) {
      reducer.step();
      ++iterations;
    }
    join.join();
  } catch (const lt::EarlyTerminationError& e) {
    const std::string what = e.what();
    std::cerr << "rank " << rank << " EarlyTerminationError after " << iterations << ": " << what << std::endl;
    if (inputs[rank] == min_inputs) {
      LT_WORKER_CHECK(what == c10::str("Rank ", rank, " exhausted all inputs."));
    } else {
      LT_WORKER_CHECK(what.find("Detected at least one rank that exhausted inputs") != std::string::npos);
    }
    // Every rank stops at the first iteration some rank does not have.
    LT_WORKER_CHECK(iterations == min_inputs);
    LT_WORKER_CHECK(!reducer.join_config().enable);
    return 0;
  }
  LT_WORKER_CHECK(false, "no EarlyTerminationError");
  return 1;
}

TEST(Join, ThrowOnEarlyTerminationThrowsTheSameTypedErrorOnEveryRank) {
  auto r = run_workers("JoinThrowOnEarlyTermination", 3, join_options("3,5,3"));
  EXPECT_TRUE(r.ok()) << r.summary();
}

LT_TEST_WORKER(JoinWarnsOnSkew) {
  struct Capture {
    std::vector<std::string> messages;
  } capture;
  lt::set_warning_handler([&capture](const std::string& msg) { capture.messages.push_back(msg); });
  auto pg = make_process_group();
  const int rank = pg->getRank();
  const std::vector<int> inputs = inputs_per_rank();
  AllReducer reducer(pg, 1);
  lt::Join join({&reducer});
  for (int i = 0; i < inputs[rank]; ++i) reducer.step();
  join.join();
  const bool behind = inputs[rank] + lt::Join::kWarnThreshold + 1 < *std::max_element(inputs.begin(), inputs.end());
  LT_WORKER_CHECK(capture.messages.size() == (behind ? 1u : 0u));
  if (behind) LT_WORKER_CHECK(capture.messages[0].find("uneven input skew of greater than 1000") != std::string::npos);
  return 0;
}

TEST(Join, WarnsOnceWhenARankShadowsMoreThan1000Iterations) {
  auto r = run_workers("JoinWarnsOnSkew", 2, join_options("0,1003"));
  EXPECT_TRUE(r.ok()) << r.summary();
}
