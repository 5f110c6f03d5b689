#pragma once
// lt::ModelSummary: the model's layers and parameter counts, printed on rank 0
// at the start of fit (Lightning's ModelSummary callback, which its Trainer
// adds by default; ours too, unless enable_model_summary is false):
//
//     | Name | Type   | Params | Mode
//   ----------------------------------------
//   0 | fc1  | Linear | 200 K  | train
//   1 | fc2  | Linear | 65.8 K | train
//   2 | fc3  | Linear | 2.6 K  | train
//   ----------------------------------------
//   269 K     Trainable params
//   0         Non-trainable params
//   269 K     Total params
//   1.077     Total estimated model params size (MB)
//   4         Modules in train mode
//   0         Modules in eval mode
//
// Lightning's table without its FLOPs column (which needs an example input
// run through a FLOP counter). Types are the C++ class names without
// namespace and "Impl" (torch::nn::LinearImpl: Linear).

#include <cstdint>
#include <string>

#include <torch/arg.h>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/options_table.h>

namespace torch::nn {
class Module;
}

namespace lt {

// The options, each with its /// doc above its row: callbacks/model_summary_options.def.
struct ModelSummaryOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/callbacks/model_summary_options.def>
#undef LT_OPTION
};

// The table above for `module` (Lightning's summarize(module, max_depth)).
std::string summarize(const torch::nn::Module& module, int64_t max_depth = 1);
// 123 -> "123  ", 1234 -> "1.2 K", 2e6 -> "2.0 M" (Lightning's get_human_readable_count).
std::string human_readable_count(int64_t number);

class ModelSummary : public Callback {
 public:
  explicit ModelSummary(ModelSummaryOptions options = {});
  std::string name() const override { return "ModelSummary"; }
  void on_fit_start(Trainer& trainer, LightningModule& module) override;

 private:
  ModelSummaryOptions options_;
};

}  // namespace lt
