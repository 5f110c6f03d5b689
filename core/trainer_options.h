#pragma once
// lt::TrainerOptions: Lightning's Trainer arguments as a LibTorch-style
// options struct, e.g. lt::TrainerOptions().max_epochs(10).accumulate_grad_batches(4).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>
#include <torch/arg.h>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/types.h>

namespace lt {

class Callback;
class Logger;
class Precision;
class Profiler;
class Strategy;
struct LRSchedulerSpec;

enum class GradientClipAlgorithm { kNorm, kValue };

// What the training loop does when the loss or a gradient is NaN or infinite.
enum class NonFinitePolicy {
  kIgnore,    // step anyway (PyTorch's and Lightning's behaviour)
  kSkipStep,  // drop the window's gradients and skip the optimizer step
  kError,     // stop with the epoch, batch, step and the first parameter affected
};

// YAML's names of the enums above, in the order errors list them.
template <>
struct OptionEnumNames<GradientClipAlgorithm> {
  static constexpr std::pair<GradientClipAlgorithm, const char*> kNames[] = {{GradientClipAlgorithm::kNorm, "norm"},
                                                                             {GradientClipAlgorithm::kValue, "value"}};
};
template <>
struct OptionEnumNames<NonFinitePolicy> {
  static constexpr std::pair<NonFinitePolicy, const char*> kNames[] = {
      {NonFinitePolicy::kError, "error"}, {NonFinitePolicy::kSkipStep, "skip_step"}, {NonFinitePolicy::kIgnore, "ignore"}};
};

// YAML's profiler: simple, pytorch (Lightning's name) or torch; null: none.
struct ProfilerByName {
  static void add(ArgSchema& schema, const char* name, const std::shared_ptr<Profiler>& d, const char* doc,
                  std::vector<std::string> choices);
  static std::shared_ptr<Profiler> read(const InitArgs& args, const char* name);
  static std::string show(const std::shared_ptr<Profiler>& profiler);
};

// The options, each with its /// doc above its row: core/trainer_options.def.
struct TrainerOptions {
#define LT_OPTION LT_OPTION_ARG
#define LT_OPTION_WITH LT_OPTION_WITH_ARG
#define LT_CPP_OPTION LT_CPP_OPTION_ARG
#include <lightning_cpp/core/trainer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
#undef LT_CPP_OPTION

 public:
  // Or by its registered name, with its default init args:
  //   lt::TrainerOptions().devices(2).strategy("ddp")
  // "auto" (the default): ddp when devices * num_nodes > 1 or the ranks were
  // started by torchrun, srun or mpirun, else single_device (plugins/strategies/registration.h).
  TrainerOptions& strategy(const char* name) {
    strategy_name_ = name != nullptr ? name : "auto";
    return *this;
  }
  TrainerOptions& strategy(const std::string& name) { return strategy(name.c_str()); }
  TrainerOptions& strategy(std::nullptr_t) {
    strategy_ = nullptr;
    strategy_name_ = "auto";
    return *this;
  }
  const std::string& strategy_name() const { return strategy_name_; }

 public:
  // Checks every value; throws lt::ValueError naming the option and the valid range.
  void validate() const;
  // The device type `accelerator` names: cpu; cuda; auto = cuda where
  // available, else cpu. The one place that reads accelerator.
  c10::DeviceType device_type() const;
  // max_epochs after Lightning's defaulting (-1 and no max_steps: 1000).
  int64_t resolved_max_epochs() const { return max_epochs() == -1 && max_steps() == -1 ? 1000 : max_epochs(); }
  // The options that shape the ranks' sequence of collectives (the loop's
  // length, accumulation, clipping, validation's place, the devices), which
  // every rank must run with alike: "trainer.<name>" and the value as YAML
  // writes it. Not in it: what may differ per rank (limit_*_batches, which
  // Join takes as uneven inputs; paths, logging, progress). The precision is
  // the strategy's to compare (a plugin has no option value).
  OptionValues rank_agreed_options() const;

 private:
  std::string strategy_name_ = "auto";
};

}  // namespace lt
