// callbacks/model_summary.h: the summary table, character for character
// Lightning's (computed with its ModelSummary).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <sstream>

#include <lightning_cpp/callbacks/model_summary.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

// Lightning's table, character for character (computed with its
// _format_summary_table and get_human_readable_count): a frozen child, a
// child in eval mode, a parameter of the model itself.
TEST(ModelSummary, PrintsLightningsTable) {
  class Net : public lt::LightningModule {
   public:
    Net() {
      fc1 = register_module("fc1", torch::nn::Linear(4, 8));
      bn = register_module("bn", torch::nn::BatchNorm1d(8));
      head = register_module("head", torch::nn::Sequential(torch::nn::Linear(8, 2), torch::nn::ReLU()));
      register_parameter("scale", torch::ones({1}));
      for (auto& p : head->parameters()) p.set_requires_grad(false);
      bn->eval();
    }
    torch::Tensor training_step(const lt::Batch&, int64_t) override { return {}; }
    lt::OptimizerConfig configure_optimizers() override { return {}; }
    torch::nn::Linear fc1{nullptr};
    torch::nn::BatchNorm1d bn{nullptr};
    torch::nn::Sequential head{nullptr};
  };
  Net net;
  EXPECT_EQ(lt::summarize(net),
            "  | Name         | Type        | Params | Mode \n"
            "-----------------------------------------------------\n"
            "0 | fc1          | Linear      | 40     | train\n"
            "1 | bn           | BatchNorm1d | 16     | eval \n"
            "2 | head         | Sequential  | 18     | train\n"
            "  | other params | n/a         | 1      | n/a  \n"
            "-----------------------------------------------------\n"
            "57        Trainable params\n"
            "18        Non-trainable params\n"
            "75        Total params\n"
            "0.000     Total estimated model params size (MB)\n"
            "5         Modules in train mode\n"
            "1         Modules in eval mode");
  const std::string deep = lt::summarize(net, 2);
  EXPECT_NE(deep.find("3 | head.0       | Linear      | 18     | train\n4 | head.1       | ReLU        | 0      |"),
            std::string::npos)
      << deep;
  for (auto [n, text] : std::vector<std::pair<int64_t, std::string>>{{0, "0  "},
                                                                    {123, "123  "},
                                                                    {1234, "1.2 K"},
                                                                    {99999, "100.0 K"},
                                                                    {100000, "100 K"},
                                                                    {2000000, "2.0 M"},
                                                                    {3000000000, "3.0 B"},
                                                                    {400000000000000, "400 T"},
                                                                    {5000000000000000, "5,000 T"}}) {
    EXPECT_EQ(lt::human_readable_count(n), text) << n;
  }
  // On by default: printed once at the start of fit, on rank 0.
  std::vector<std::string> printed;
  lt::set_info_handler([&](const std::string& m) { printed.push_back(m); });
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).enable_progress_bar(false).logger(nullptr));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{0.5}), loader());
  lt::set_info_handler(nullptr);
  EXPECT_EQ(std::count_if(printed.begin(), printed.end(),
                          [](const std::string& m) { return m.find("| Name | Type   | Params") != std::string::npos; }),
            1);
}

}  // namespace
