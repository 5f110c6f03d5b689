#include <lightning_cpp/plugins/strategies/registration.h>

#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/plugins/strategies/ddp.h>
#include <lightning_cpp/plugins/strategies/single_device.h>

namespace lt {

void register_builtin_strategies(Registry& registry) {
  registry.add<Strategy>(
      "single_device", "one process on one device",
      ArgSchema().add_string("device", std::nullopt, "torch device, e.g. cpu or cuda:0 (null: from trainer.accelerator)"),
      [](const InitArgs& args) {
        std::string device = args.get_optional_string("device").value_or("");
        if (device.empty()) {
          const bool cuda = args.trainer() != nullptr && args.trainer()->device_type() == torch::kCUDA;
          device = cuda ? "cuda:0" : "cpu";
        }
        try {
          return std::make_shared<SingleDeviceStrategy>(torch::Device(device));
        } catch (const c10::Error&) {
          throw ValueError(c10::str("single_device: '", device, "' is not a torch device (e.g. cpu, cuda:0)"));
        }
      });
  registry.add<Strategy>(
      "ddp", "data parallel: one process per device (trainer.devices x num_nodes), gradients averaged by c10d",
      ArgSchema()
          .add_string("process_group_backend", std::nullopt, "gloo or nccl (null: nccl on cuda, else gloo)",
                      {"gloo", "nccl"})
          .add_float("process_group_timeout", 180.0, "seconds a rendezvous or collective may take")
          .add_float("bucket_cap_mb", 25.0, "gradient bucket size in MiB after the first iteration")
          .add_bool("find_unused_parameters", false, "allow parameters that get no gradient on some rank")
          .add_bool("gradient_as_bucket_view", false, "gradients are views into the allreduce buckets")
          .add_bool("broadcast_buffers", true, "broadcast buffers from rank 0 before each forward")
          .add_float("launch_timeout", 0.0, "local spawn: kill the workers after this many seconds (0: never)")
          .add_string("worker_log_dir", std::nullopt, "local spawn: write rank r's output to <dir>/rank<r>.log"),
      [](const InitArgs& args) {
        auto ms = [](double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0)); };
        return std::make_shared<DDPStrategy>(
            DDPStrategyOptions()
                .process_group_backend(args.get_optional_string("process_group_backend").value_or(""))
                .process_group_timeout(ms(args.get_float("process_group_timeout")))
                .bucket_cap_mb(args.get_float("bucket_cap_mb"))
                .find_unused_parameters(args.get_bool("find_unused_parameters"))
                .gradient_as_bucket_view(args.get_bool("gradient_as_bucket_view"))
                .broadcast_buffers(args.get_bool("broadcast_buffers"))
                .launch_timeout(ms(args.get_float("launch_timeout")))
                .worker_log_dir(args.get_optional_string("worker_log_dir").value_or("")));
      });
}

}  // namespace lt
