// core/lr_scheduler.h against PyTorch's torch.optim.lr_scheduler: every
// scheduler's rates (and OneCycleLR's momentum) after each step equal what
// tests/python/scheduler_oracle.py prints for the same case, two param
// groups with their own rates; a scheduler's state_dict resumes it mid-way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lr_scheduler.h>

namespace {

constexpr int kSteps = 40;
// ReduceLROnPlateau's metric at step i (the oracle's METRICS).
double metric(int i) {
  if (i < 8) return 1.0 - 0.05 * i;
  if (i < 18) return 0.65;
  if (i == 18) return 0.64;
  return 0.6399;
}

struct Row {
  double lr0, lr1, momentum;
};

std::map<std::string, std::vector<Row>> oracle() {
  std::map<std::string, std::vector<Row>> out;
  const std::string cmd =
      std::string(LT_PYTHON) + " -W ignore " + LT_SOURCE_DIR + "/tests/python/scheduler_oracle.py";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) text.append(buf, n);
  if (::pclose(pipe) != 0) return {};
  std::istringstream lines(text);
  std::string name;
  int step = 0;
  Row row{};
  while (lines >> name >> step >> row.lr0 >> row.lr1 >> row.momentum) out[name].push_back(row);
  return out;
}

// Two groups (0.1 and 0.05), SGD with momentum 0.9 or Adam with beta1 0.9, as the oracle's.
struct Model {
  explicit Model(bool adam) {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{torch::zeros({2}, torch::requires_grad())});
    groups.emplace_back(std::vector<torch::Tensor>{torch::zeros({2}, torch::requires_grad())});
    if (adam) {
      groups[1].set_options(std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(0.05)));
      optimizer = std::make_shared<torch::optim::Adam>(groups, torch::optim::AdamOptions(0.1).betas({0.9, 0.999}));
    } else {
      groups[1].set_options(std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.05).momentum(0.9)));
      optimizer = std::make_shared<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1).momentum(0.9));
    }
  }
  Row row() const {
    auto& groups = optimizer->param_groups();
    auto& options = groups[0].options();
    double momentum = 0;
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) momentum = sgd->momentum();
    if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&options)) momentum = std::get<0>(adam->betas());
    return {lt::get_lr(groups[0]), lt::get_lr(groups[1]), momentum};
  }
  std::shared_ptr<torch::optim::Optimizer> optimizer;
};

using Factory = std::function<std::shared_ptr<lt::LRScheduler>(torch::optim::Optimizer&)>;

struct Case {
  bool adam;
  Factory make;
};

std::map<std::string, Case> cases() {
  using O = torch::optim::Optimizer;
  return {
      {"step", {false, [](O& o) { return std::make_shared<lt::StepLR>(o, 3, 0.5); }}},
      {"multistep",
       {false, [](O& o) { return std::make_shared<lt::MultiStepLR>(o, std::vector<int64_t>{5, 12, 12, 30}, 0.3); }}},
      {"exponential", {false, [](O& o) { return std::make_shared<lt::ExponentialLR>(o, 0.9); }}},
      {"cosine", {false, [](O& o) { return std::make_shared<lt::CosineAnnealingLR>(o, 15, 0.001); }}},
      {"cosine_restarts",
       {false, [](O& o) { return std::make_shared<lt::CosineAnnealingWarmRestarts>(o, 4, 2, 0.002); }}},
      {"linear", {false, [](O& o) { return std::make_shared<lt::LinearLR>(o, 0.1, 1.0, 6); }}},
      {"one_cycle",
       {false, [](O& o) { return std::make_shared<lt::OneCycleLR>(o, lt::OneCycleLROptions({1.0, 0.5}, kSteps)); }}},
      {"one_cycle_linear_3phase_adam", {true, [](O& o) {
         return std::make_shared<lt::OneCycleLR>(o, lt::OneCycleLROptions(0.3, kSteps)
                                                        .pct_start(0.25)
                                                        .anneal_strategy("linear")
                                                        .three_phase(true)
                                                        .div_factor(10.0)
                                                        .final_div_factor(100.0)
                                                        .base_momentum(0.8)
                                                        .max_momentum(0.95));
       }}},
      {"warmup_cosine", {false, [](O& o) {
         auto warmup = std::make_shared<lt::LinearLR>(o, 0.01, 1.0, 5);
         auto cosine = std::make_shared<lt::CosineAnnealingLR>(o, 20, 0.0);
         return std::make_shared<lt::SequentialLR>(o, std::vector<std::shared_ptr<lt::LRScheduler>>{warmup, cosine},
                                                   std::vector<int64_t>{5});
       }}},
      {"plateau", {false, [](O& o) {
         return std::make_shared<lt::ReduceLROnPlateau>(o, lt::ReduceLROnPlateauOptions()
                                                               .factor(0.5)
                                                               .patience(2)
                                                               .threshold(1e-2)
                                                               .cooldown(1)
                                                               .min_lr({0.01, 0.004}));
       }}},
      {"plateau_max_abs", {false, [](O& o) {
         return std::make_shared<lt::ReduceLROnPlateau>(o, lt::ReduceLROnPlateauOptions()
                                                               .mode("max")
                                                               .factor(0.1)
                                                               .patience(1)
                                                               .threshold(0.05)
                                                               .threshold_mode("abs"));
       }}},
  };
}

void step(lt::LRScheduler& s, const std::string& name, int i) {
  if (!s.monitors_metric()) return s.step();
  s.step(name == "plateau_max_abs" ? -metric(i - 1) : metric(i - 1));
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(std::abs(b), 1e-3); }

void expect_row(const Row& got, const Row& want, const std::string& where) {
  EXPECT_TRUE(near(got.lr0, want.lr0)) << where << ": lr of group 0 " << got.lr0 << ", PyTorch's " << want.lr0;
  EXPECT_TRUE(near(got.lr1, want.lr1)) << where << ": lr of group 1 " << got.lr1 << ", PyTorch's " << want.lr1;
  EXPECT_TRUE(near(got.momentum, want.momentum)) << where << ": momentum " << got.momentum << ", PyTorch's "
                                                 << want.momentum;
}

TEST(LRSchedulers, EachEqualsPyTorchsStepByStep) {
  const auto expected = oracle();
  if (expected.empty()) GTEST_SKIP() << LT_PYTHON << " with torch is not installed";
  for (const auto& [name, c] : cases()) {
    ASSERT_TRUE(expected.count(name) != 0) << name << " is not among the oracle's cases";
    const std::vector<Row>& rows = expected.at(name);
    Model model(c.adam);
    auto s = c.make(*model.optimizer);
    expect_row(model.row(), rows[0], name + " when made");
    for (size_t i = 1; i < rows.size(); ++i) {
      step(*s, name, static_cast<int>(i));
      expect_row(model.row(), rows[i], name + " after step " + std::to_string(i));
    }
  }
}

// Stopped at step 17 and resumed into a new optimizer and scheduler from the
// state dicts, each goes on as PyTorch's uninterrupted schedule.
TEST(LRSchedulers, AStateDictResumesEachMidway) {
  const auto expected = oracle();
  if (expected.empty()) GTEST_SKIP() << LT_PYTHON << " with torch is not installed";
  constexpr int kStop = 17;
  for (const auto& [name, c] : cases()) {
    const std::vector<Row>& rows = expected.at(name);
    Model first(c.adam);
    auto s = c.make(*first.optimizer);
    for (int i = 1; i <= kStop; ++i) step(*s, name, i);
    const lt::StateDict state = s->state_dict();
    Model second(c.adam);
    auto resumed = c.make(*second.optimizer);
    // The optimizer's own state carries the rates a metric-following scheduler set in place.
    auto& from = first.optimizer->param_groups();
    auto& to = second.optimizer->param_groups();
    for (size_t g = 0; g < from.size(); ++g) lt::set_lr(to[g], lt::get_lr(from[g]));
    resumed->load_state_dict(state);
    expect_row(second.row(), rows[kStop], name + " resumed at step " + std::to_string(kStop));
    for (size_t i = kStop + 1; i < rows.size(); ++i) {
      step(*resumed, name, static_cast<int>(i));
      expect_row(second.row(), rows[i], name + " resumed, after step " + std::to_string(i));
    }
  }
}

TEST(LRSchedulers, BadArgumentsAreNamed) {
  Model model(false);
  auto& o = *model.optimizer;
  EXPECT_THROW(lt::CosineAnnealingLR(o, 0), lt::ValueError);
  EXPECT_THROW(lt::OneCycleLR(o, lt::OneCycleLROptions({1.0, 2.0, 3.0}, 10)), lt::ValueError);
  EXPECT_THROW(lt::ReduceLROnPlateau(o, lt::ReduceLROnPlateauOptions().mode("lowest")), lt::ValueError);
  try {
    lt::ReduceLROnPlateau plateau(o);
    plateau.step();
    FAIL() << "a metric-following scheduler stepped without its metric";
  } catch (const lt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("step(metric)"), std::string::npos) << e.what();
  }
}

}  // namespace
