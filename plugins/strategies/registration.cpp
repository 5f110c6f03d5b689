#include <lightning_cpp/plugins/strategies/registration.h>

#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/plugins/strategies/ddp.h>
#include <lightning_cpp/plugins/strategies/single_device.h>

namespace lt {

namespace {

const char* uneven_inputs_name(UnevenInputs u) {
  return u == UnevenInputs::kPad ? "pad" : u == UnevenInputs::kError ? "error" : "join";
}

const char* join_mode_name(JoinMode mode) { return mode == JoinMode::kPyTorch ? "pytorch" : "lockstep"; }

// PyTorch's names of its default hooks (torch.distributed.algorithms.ddp_comm_hooks.default_hooks).
constexpr const char* kCommHookNames[] = {"allreduce_hook", "fp16_compress_hook", "bf16_compress_hook"};

UnevenInputs parse_uneven_inputs(const std::string& name) {
  return name == "pad" ? UnevenInputs::kPad : name == "error" ? UnevenInputs::kError : UnevenInputs::kJoin;
}

DDPCommHook parse_comm_hook(const std::string& name) {
  return name == kCommHookNames[1] ? DDPCommHook::kFp16Compress
         : name == kCommHookNames[2] ? DDPCommHook::kBf16Compress
                                     : DDPCommHook::kAllreduce;
}

}  // namespace

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
  const DDPStrategyOptions ddp;
  auto seconds = [](std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; };
  registry.add<Strategy>(
      "ddp", "data parallel: one process per device (trainer.devices x num_nodes), gradients averaged by c10d",
      ArgSchema()
          .add_string("process_group_backend", std::nullopt, "gloo or nccl (null: nccl on cuda, else gloo)",
                      {"gloo", "nccl"})
          .add_float("process_group_timeout", seconds(ddp.process_group_timeout()),
                     "seconds a rendezvous or collective may take")
          .add_float("bucket_cap_mb", ddp.bucket_cap_mb(), "gradient bucket size in MiB after the first iteration")
          .add_bool("find_unused_parameters", ddp.find_unused_parameters(),
                    "allow parameters that get no gradient on some rank")
          .add_bool("gradient_as_bucket_view", ddp.gradient_as_bucket_view(),
                    "gradients are views into the allreduce buckets")
          .add_bool("broadcast_buffers", ddp.broadcast_buffers(), "broadcast buffers from rank 0 before each forward")
          .add_string("ddp_comm_hook", kCommHookNames[static_cast<int>(ddp.ddp_comm_hook())],
                      "how gradient buckets are reduced: fp32, or compressed to float16 / bfloat16 (nccl)",
                      {kCommHookNames[0], kCommHookNames[1], kCommHookNames[2]})
          .add_float("launch_timeout", seconds(ddp.launch_timeout()),
                     "local spawn: kill the workers after this many seconds (0: never)")
          .add_string("worker_log_dir", std::nullopt, "local spawn: write rank r's output to <dir>/rank<r>.log")
          .add_string("uneven_inputs", uneven_inputs_name(ddp.uneven_inputs()), "ranks with different batch counts",
                      {"join", "pad", "error"})
          .add_bool("join_enable", ddp.join_enable(),
                    "uneven_inputs join: train under Join (false: refuse uneven shards)")
          .add_bool("join_throw_on_early_termination", ddp.join_throw_on_early_termination(),
                    "Join: every rank stops with an error once one runs out of data")
          .add_bool("join_divide_by_initial_world_size", ddp.join_divide_by_initial_world_size(),
                    "Join: average gradients over all ranks (false: over the ranks with data)")
          .add_string("join_mode", join_mode_name(ddp.join_mode()),
                      "lockstep: joined ranks step with the others; pytorch: as torch's Join", {"lockstep", "pytorch"}),
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
                .ddp_comm_hook(parse_comm_hook(args.get_string("ddp_comm_hook")))
                .launch_timeout(ms(args.get_float("launch_timeout")))
                .worker_log_dir(args.get_optional_string("worker_log_dir").value_or(""))
                .uneven_inputs(parse_uneven_inputs(args.get_string("uneven_inputs")))
                .join_enable(args.get_bool("join_enable"))
                .join_throw_on_early_termination(args.get_bool("join_throw_on_early_termination"))
                .join_divide_by_initial_world_size(args.get_bool("join_divide_by_initial_world_size"))
                .join_mode(args.get_string("join_mode") == "pytorch" ? JoinMode::kPyTorch : JoinMode::kLockstep));
      });
}

}  // namespace lt
