// core/throughput.h: the window keeps the last window_size records and its
// rates are its counts over its time; FlopCounter counts what Python's
// torch.utils.flop_counter.FlopCounterMode counts for an MLP's training step
// (2 * batch * in * out per matrix product, forward and the backward's
// gradients: 7424 for 10 -> 32 -> 3 on 4 samples, as FlopCounterMode gives in
// PyTorch 2.11); the matrix-product rate is a rate.
#include <gtest/gtest.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/throughput.h>

namespace {

TEST(Throughput, RatesAreTheWindowsCountsOverItsTime) {
  lt::Throughput throughput(3);
  EXPECT_FALSE(throughput.window().has_value()) << "no rate from no record";
  throughput.update({1.0, 1, 4, 40, 100});
  EXPECT_FALSE(throughput.window().has_value()) << "no rate from one record";
  throughput.update({1.5, 2, 8, 80, 200});
  throughput.update({2.5, 3, 12, 120, 300});
  throughput.update({3.0, 4, 20, 200, 400});  // the first record leaves the window
  const auto w = throughput.window();
  ASSERT_TRUE(w.has_value());
  EXPECT_DOUBLE_EQ(w->time, 1.5);
  EXPECT_DOUBLE_EQ(w->samples, 12);
  EXPECT_DOUBLE_EQ(throughput.totals().samples, 20);
  const auto rates = lt::throughput_rates(*w, "x/", true, true, 100.0);
  EXPECT_DOUBLE_EQ(rates.at("x/batches_per_sec"), 2.0 / 1.5);
  EXPECT_DOUBLE_EQ(rates.at("x/samples_per_sec"), 12 / 1.5);
  EXPECT_DOUBLE_EQ(rates.at("x/items_per_sec"), 120 / 1.5);
  EXPECT_DOUBLE_EQ(rates.at("x/flops_per_sec"), 200 / 1.5);
  EXPECT_DOUBLE_EQ(rates.at("x/mfu"), 200 / 1.5 / 100.0);
  EXPECT_EQ(lt::throughput_rates(*w, "x/", false, false, 0).size(), 2u) << "no items, FLOPs or MFU unasked";
  // Cumulative records only: a count that goes back is an error naming it.
  try {
    throughput.update({4.0, 5, 19, 200, 400});
    FAIL() << "a decreasing sample count was taken";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("samples went back from 20 to 19"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lt::Throughput(1), lt::ValueError);
}

TEST(Throughput, FlopCounterCountsAnMlpTrainingStepAsFlopCounterMode) {
  const int64_t batch = 4, in = 10, hidden = 32, out = 3;
  torch::nn::Sequential mlp(torch::nn::Linear(in, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, out));
  const auto x = torch::randn({batch, in}), y = torch::randn({batch, out});
  ASSERT_TRUE(lt::FlopCounter::available());
  lt::FlopCounter counter;
  counter.start();
  EXPECT_FALSE(lt::FlopCounter::available()) << "one profiler per thread";
  torch::mse_loss(mlp->forward(x), y).backward();
  const double flops = counter.stop();
  // Forward: both products; backward: both weight gradients and the hidden
  // layer's input gradient (the data needs none).
  const double expected = 2.0 * batch * (in * hidden * 2 + hidden * out * 3);
  EXPECT_EQ(expected, 7424);
  EXPECT_DOUBLE_EQ(flops, expected);
  EXPECT_TRUE(lt::FlopCounter::available()) << "the profiler is off after stop()";
}

TEST(Throughput, MatmulRateIsPositiveAndFinite) {
  const double rate = lt::measure_matmul_flops(torch::kCPU, torch::kFloat);
  EXPECT_GT(rate, 1e8) << "below 0.1 GFLOP/s for sgemm";
  EXPECT_LT(rate, 1e14);
}

}  // namespace
