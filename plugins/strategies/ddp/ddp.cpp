#include <lightning_cpp/plugins/strategies/ddp/ddp.h>

#include <lightning_cpp/core/check.h>

namespace lt {

DDPStrategy::DDPStrategy(DDPStrategyOptions options) : options_(std::move(options)) {
  {
    const DDPStrategyOptions& options = options_;
    const char* owner = "strategy ddp: ";
#define LT_OPTION LT_OPTION_CHECK
#include <lightning_cpp/plugins/strategies/ddp/ddp_options.def>
#undef LT_OPTION
  }
  LT_CHECK_VALUE(options_.ddp_comm_hook() == DDPCommHook::kAllreduce || options_.join_divide_by_initial_world_size(),
                 "strategy ddp: ddp_comm_hook divides each bucket by the world size, so it cannot average over the ",
                 "ranks with data (join_divide_by_initial_world_size: false); use one or the other");
}

OptionValues DDPStrategy::option_values() const {
  OptionValues values;
  const DDPStrategyOptions& options = options_;
#define LT_OPTION LT_OPTION_SHOW
#include <lightning_cpp/plugins/strategies/ddp/ddp_options.def>
#undef LT_OPTION
  return values;
}

ParallelSettings DDPStrategy::parallel_settings() const { return parallel_settings_of(options_, options_.join_mode()); }

std::unique_ptr<GradientSync> DDPStrategy::make_gradient_sync(std::shared_ptr<torch::nn::Module> module,
                                                              const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                                                              std::function<bool()> stop_wish) {
  return std::make_unique<DistributedDataParallel>(std::move(module), group,
                                                   DistributedDataParallelOptions()
                                                       .bucket_cap_mb(options_.bucket_cap_mb())
                                                       .find_unused_parameters(options_.find_unused_parameters())
                                                       .gradient_as_bucket_view(options_.gradient_as_bucket_view())
                                                       .broadcast_buffers(options_.broadcast_buffers())
                                                       .comm_hook(options_.ddp_comm_hook())
                                                       .stop_wish(std::move(stop_wish)));
}

}  // namespace lt
