// lt::step_optimizer (core/fused_optimizer.h) against LibTorch's own
// optimizer.step(): the same parameters, gradients and options, several steps,
// and every parameter and state tensor compared bit for bit.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/core/fused_optimizer.h>
#include <lightning_cpp/core/optimizer_state.h>

namespace {

using MakeOptimizer = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

// Shapes with vector tails of every length, one above ATen's grain size
// (split over threads), a scalar.
std::vector<torch::Tensor> parameters(torch::ScalarType dtype = torch::kFloat) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> out;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{37, 19}, {19}, {1}, {33000}, {5, 3}, {}}) {
    out.push_back(torch::randn(shape, dtype).requires_grad_());
  }
  return out;
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

// Gradients of every magnitude; the scalar parameter gets none in odd steps
// (an optimizer skips it there).
void set_gradients(std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].dim() == 0 && step % 2 == 1) {
      params[i].mutable_grad() = torch::Tensor();
      continue;
    }
    params[i].mutable_grad() = torch::randn_like(params[i]) * std::pow(10.0, static_cast<double>(i % 3) - 1);
  }
}

void expect_bitwise_equal(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const torch::Tensor differ = a.contiguous().view(torch::kInt) != b.contiguous().view(torch::kInt);
  EXPECT_EQ(differ.sum().item<int64_t>(), 0) << what << ": " << differ.sum().item<int64_t>() << " of "
                                             << a.numel() << " elements differ";
}

// Steps one optimizer with optimizer.step() and another with
// lt::step_optimizer, 6 times, and compares parameters and state bitwise.
void expect_steps_equal(const std::string& name, const MakeOptimizer& make) {
  SCOPED_TRACE(name);
  std::vector<torch::Tensor> reference = parameters(), fused = copies(reference);
  auto reference_optimizer = make(reference), fused_optimizer = make(fused);
  for (int step = 0; step < 6; ++step) {
    set_gradients(reference, step);
    set_gradients(fused, step);
    reference_optimizer->step();
    ASSERT_TRUE(lt::steps_fused(*fused_optimizer)) << "takes the fused pass";
    lt::step_optimizer(*fused_optimizer);
  }
  for (size_t i = 0; i < reference.size(); ++i) {
    expect_bitwise_equal(fused[i], reference[i], "parameter " + std::to_string(i));
  }
  const c10::IValue reference_state = lt::optimizer_state_dict(*reference_optimizer);
  const c10::IValue fused_state = lt::optimizer_state_dict(*fused_optimizer);
  const auto reference_entries = reference_state.toGenericDict().at("state").toGenericDict();
  const auto fused_entries = fused_state.toGenericDict().at("state").toGenericDict();
  ASSERT_EQ(fused_entries.size(), reference_entries.size());
  for (const auto& entry : reference_entries) {
    const auto reference_fields = entry.value().toGenericDict();
    const auto fused_fields = fused_entries.at(entry.key()).toGenericDict();
    ASSERT_EQ(fused_fields.size(), reference_fields.size());
    for (const auto& field : reference_fields) {
      const std::string what = "state " + std::to_string(entry.key().toInt()) + " " + field.key().toStringRef();
      const c10::IValue mine = fused_fields.at(field.key());
      if (field.value().isTensor()) {
        expect_bitwise_equal(mine.toTensor(), field.value().toTensor(), what);
      } else {
        EXPECT_EQ(mine, field.value()) << what;
      }
    }
  }
}

template <typename Optimizer, typename Options>
MakeOptimizer maker(Options options) {
  return [options](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<Optimizer>(params, options);
  };
}

TEST(FusedOptimizerTest, StepsBitwiseAsLibTorchsOwn) {
  using torch::optim::Adam;
  using torch::optim::AdamOptions;
  using torch::optim::AdamW;
  using torch::optim::AdamWOptions;
  using torch::optim::SGD;
  using torch::optim::SGDOptions;
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    SCOPED_TRACE("intra-op threads " + std::to_string(threads));
    expect_steps_equal("SGD", maker<SGD>(SGDOptions(0.1)));
    expect_steps_equal("SGD weight decay, momentum, dampening",
                       maker<SGD>(SGDOptions(0.05).momentum(0.9).dampening(0.1).weight_decay(1e-3)));
    expect_steps_equal("SGD nesterov", maker<SGD>(SGDOptions(0.05).momentum(0.8).nesterov(true).weight_decay(1e-2)));
    expect_steps_equal("Adam", maker<Adam>(AdamOptions(1e-3)));
    expect_steps_equal("Adam weight decay, amsgrad",
                       maker<Adam>(AdamOptions(3e-3).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1).amsgrad(true)));
    expect_steps_equal("AdamW", maker<AdamW>(AdamWOptions(1e-3)));
    expect_steps_equal("AdamW amsgrad", maker<AdamW>(AdamWOptions(1e-2).weight_decay(0.3).amsgrad(true)));
  }
  at::set_num_threads(1);
}

TEST(FusedOptimizerTest, ParameterGroupsWithTheirOwnOptions) {
  std::vector<torch::Tensor> params = parameters();
  auto make = [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>(p.begin(), p.begin() + 3),
                        std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(1e-2).weight_decay(0.1)));
    groups.emplace_back(std::vector<torch::Tensor>(p.begin() + 3, p.end()));
    return std::make_unique<torch::optim::Adam>(groups, torch::optim::AdamOptions(1e-3));
  };
  expect_steps_equal("Adam with two groups", make);
}

// What it cannot fuse it leaves to optimizer.step(): the result is LibTorch's.
TEST(FusedOptimizerTest, OtherOptimizersAndDtypesStepAsBefore) {
  struct MyAdam : torch::optim::Adam {
    using torch::optim::Adam::Adam;
    torch::Tensor step(LossClosure closure = nullptr) override {
      ++steps;
      return torch::optim::Adam::step(closure);
    }
    int steps = 0;
  };
  std::vector<torch::Tensor> params = parameters();
  MyAdam mine(params, torch::optim::AdamOptions(1e-3));
  set_gradients(params, 0);
  EXPECT_FALSE(lt::steps_fused(mine)) << "a subclass may step otherwise";
  lt::step_optimizer(mine);
  EXPECT_EQ(mine.steps, 1);

  std::vector<torch::Tensor> doubles = parameters(torch::kDouble), reference = copies(doubles);
  torch::optim::RMSprop rmsprop(doubles, torch::optim::RMSpropOptions(1e-2));
  torch::optim::Adam adam(doubles, torch::optim::AdamOptions(1e-2)), adam_reference(reference, torch::optim::AdamOptions(1e-2));
  set_gradients(doubles, 0);
  set_gradients(reference, 0);
  EXPECT_FALSE(lt::steps_fused(rmsprop));
  EXPECT_FALSE(lt::steps_fused(adam)) << "float64 parameters";
  lt::step_optimizer(adam);
  adam_reference.step();
  for (size_t i = 0; i < doubles.size(); ++i) EXPECT_TRUE(torch::equal(doubles[i], reference[i])) << i;

  std::vector<torch::Tensor> strided = {torch::randn({8, 6}).t().requires_grad_()};
  torch::optim::SGD sgd(strided, torch::optim::SGDOptions(0.1));
  strided[0].mutable_grad() = torch::ones({6, 8});
  EXPECT_FALSE(lt::steps_fused(sgd)) << "a transposed parameter";
}

// An option beyond float's range where LibTorch passes it as an alpha: the
// fused step throws LibTorch's own error, and leaves that parameter unchanged.
TEST(FusedOptimizerTest, AnOptionBeyondFloatThrowsLibTorchsError) {
  const std::vector<MakeOptimizer> makes = {
      [](std::vector<torch::Tensor> p) { return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(1e39)); },
      [](std::vector<torch::Tensor> p) { return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e39)); },
  };
  for (const MakeOptimizer& make : makes) {
    auto theirs = parameters(), ours = copies(theirs);
    set_gradients(theirs, 0);
    set_gradients(ours, 0);
    std::string their_error, our_error;
    try {
      make(theirs)->step();
    } catch (const std::exception& e) {
      their_error = e.what();
    }
    auto optimizer = make(ours);
    const torch::Tensor before = ours[0].detach().clone();
    try {
      lt::step_optimizer(*optimizer);
    } catch (const std::exception& e) {
      our_error = e.what();
    }
    EXPECT_NE(their_error.find("value cannot be converted to type float without overflow"), std::string::npos)
        << their_error;
    EXPECT_NE(our_error.find("value cannot be converted to type float without overflow"), std::string::npos)
        << our_error;
    EXPECT_TRUE(ours[0].equal(before));
  }
}

}  // namespace
