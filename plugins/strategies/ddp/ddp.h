#pragma once
// DDPStrategy ("ddp"): data-parallel training over a c10d process group,
// one process per device (Lightning's strategies/ddp.py).
//
//   lt::Trainer trainer(lt::TrainerOptions().devices(2).strategy(
//       std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(60)))));
//   trainer.fit(model, data);   // in the supervisor of a local spawn this never returns
//
// Everything about being one of several processes (launch, process group,
// watchdog, sharding, the no_sync + Join epoch context, collectives) is the
// ParallelStrategy's (strategies/parallel.h). DDP adds only its gradient
// sync: at setup() the module is wrapped in a DistributedDataParallel
// (ddp/distributed_data_parallel.h: c10d's Reducer, PyTorch's DDP).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/plugins/strategies/ddp/distributed_data_parallel.h>
#include <lightning_cpp/plugins/strategies/parallel.h>

namespace lt {

// PyTorch's names of its default hooks (torch.distributed.algorithms.ddp_comm_hooks.default_hooks).
template <>
struct OptionEnumNames<DDPCommHook> {
  static constexpr std::pair<DDPCommHook, const char*> kNames[] = {{DDPCommHook::kAllreduce, "allreduce_hook"},
                                                                   {DDPCommHook::kFp16Compress, "fp16_compress_hook"},
                                                                   {DDPCommHook::kBf16Compress, "bf16_compress_hook"}};
};

// The options, each with its /// doc above its row: ddp/ddp_options.def,
// after the shared ones of parallel_options.def.
struct DDPStrategyOptions {
#define LT_OPTION LT_OPTION_ARG
#include <lightning_cpp/plugins/strategies/ddp/ddp_options.def>
#undef LT_OPTION
};

class DDPStrategy : public ParallelStrategy {
 public:
  explicit DDPStrategy(DDPStrategyOptions options = {});
  std::string name() const override { return "ddp"; }

  const DDPStrategyOptions& options() const { return options_; }
  // Between runs (a Trainer's fit/validate/test) the run settings may change:
  // uneven_inputs, join_*, bucket and buffer options. The process group is
  // made once per process, with the first run's backend and timeout.
  DDPStrategyOptions& options() { return options_; }
  // Null outside setup()..teardown().
  DistributedDataParallel* ddp() const { return static_cast<DistributedDataParallel*>(gradient_sync()); }

 protected:
  ParallelSettings parallel_settings() const override;
  OptionValues option_values() const override;
  std::unique_ptr<GradientSync> make_gradient_sync(std::shared_ptr<torch::nn::Module> module,
                                                   const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                   std::function<bool()> stop_wish) override;

 private:
  DDPStrategyOptions options_;
};

}  // namespace lt
