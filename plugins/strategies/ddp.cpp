#include <lightning_cpp/plugins/strategies/ddp.h>

#include <csignal>
#include <cstring>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/collective_layer.h>
#include <lightning_cpp/core/env.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/plugins/strategies/ddp/epoch_contexts.h>
#include <lightning_cpp/plugins/strategies/ddp/process_group.h>
#include <lightning_cpp/plugins/strategies/ddp/sharding.h>

namespace lt {

DDPStrategy::DDPStrategy(DDPStrategyOptions options) : options_(std::move(options)) {
  LT_CHECK_VALUE(options_.process_group_timeout().count() > 0, "strategy ddp: process_group_timeout must be > 0");
  LT_CHECK_VALUE(options_.bucket_cap_mb() > 0, "strategy ddp: bucket_cap_mb must be > 0, got ",
                 options_.bucket_cap_mb());
  LT_CHECK_VALUE(options_.launch_timeout().count() >= 0, "strategy ddp: launch_timeout must be >= 0");
  LT_CHECK_VALUE(options_.ddp_comm_hook() == DDPCommHook::kAllreduce || options_.join_divide_by_initial_world_size(),
                 "strategy ddp: ddp_comm_hook divides each bucket by the world size, so it cannot average over the ",
                 "ranks with data (join_divide_by_initial_world_size: false); use one or the other");
}

DDPStrategy::~DDPStrategy() = default;

int64_t DDPStrategy::local_rank() const {
  if (environment_) return local_rank_;
  return select_cluster_environment()->local_rank();
}

void DDPStrategy::setup_environment(const TrainerOptions& options) {
  if (process_group()) return;  // fit, then validate/test: one process group per process
  LT_CHECK_VALUE(options.devices() >= 1, "strategy ddp: devices must be >= 1, got ", options.devices());
  LT_CHECK_VALUE(options.num_nodes() >= 1, "strategy ddp: num_nodes must be >= 1, got ", options.num_nodes());
  // Fail before launching anything.
  const std::string backend =
      resolve_process_group_backend(options_.process_group_backend(), options.device_type(), options.accelerator());
  environment_ = select_cluster_environment();
  const int64_t expected = options.devices() * options.num_nodes();
  if (!environment_->creates_processes_externally()) {
    LocalSpawnOptions spawn;
    spawn.timeout = options_.launch_timeout();
    spawn.worker_log_dir = options_.worker_log_dir();
    if (options.num_nodes() > 1) {
      // Lightning's manual multi-node: the same command on every node.
      const auto address = env::get("MASTER_ADDR");
      const auto port = env::get_int("MASTER_PORT");
      const auto node = env::get_int("NODE_RANK");
      LT_CHECK_VALUE(address && port && node, "strategy ddp: num_nodes=", options.num_nodes(),
                     " needs ranks started by a cluster launcher (torchrun, srun, mpirun), or the same command on "
                     "every node with MASTER_ADDR (the address of node 0), MASTER_PORT and NODE_RANK set; missing:",
                     address ? "" : " MASTER_ADDR", port ? "" : " MASTER_PORT", node ? "" : " NODE_RANK");
      LT_CHECK_VALUE(*node >= 0 && *node < options.num_nodes(), "strategy ddp: NODE_RANK=", *node,
                     " must be in [0, num_nodes=", options.num_nodes(), ")");
      spawn.num_nodes = options.num_nodes();
      spawn.node_rank = *node;
      spawn.main_address = *address;
      spawn.main_port = static_cast<int>(*port);
    }
    if (expected > 1) supervise_local_spawn(options.devices(), spawn);
  } else if (expected == 1 && environment_->world_size() > 1) {
    // devices and num_nodes left at 1: the launcher's layout is the run's.
    rank_zero_info("lightning-cpp: strategy ddp: the ", environment_->name(), " environment has ",
                   environment_->world_size(), " ranks; devices: 1 and num_nodes: 1 follow it");
  } else {
    LT_CHECK_VALUE(environment_->world_size() == expected, "strategy ddp: devices (", options.devices(),
                   ") * num_nodes (", options.num_nodes(), ") = ", expected, ", but the ", environment_->name(),
                   " environment has a world size of ", environment_->world_size(), "; make them agree");
  }
  rank_ = environment_->global_rank();
  local_rank_ = environment_->local_rank();
  node_rank_ = environment_->node_rank();
  world_size_ = environment_->world_size();
  if (options.device_type() == torch::kCUDA) {
    LT_CHECK_VALUE(torch::cuda::is_available(), "strategy ddp: accelerator ", options.accelerator(),
                   " but CUDA is not available in this LibTorch/machine");
    LT_CHECK_VALUE(local_rank_ < static_cast<int64_t>(torch::cuda::device_count()), "strategy ddp: local rank ",
                   local_rank_, " has no CUDA device (", torch::cuda::device_count(), " visible)");
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank_));
  } else {
    device_ = torch::kCPU;
  }
  const std::chrono::milliseconds timeout = options_.process_group_timeout();
  DistributedConnection connection = init_process_group(*environment_, backend, timeout);
  connection_ = connection;
  if (world_size_ > 1) {
    // A peer that died makes gloo's next send hit a closed socket: let that
    // be an EPIPE error the watchdog reports, not a SIGPIPE that kills this
    // rank silently (Python, and so PyTorch's DDP, ignores SIGPIPE too).
    std::signal(SIGPIPE, SIG_IGN);
    watchdog_ = std::make_unique<CollectiveWatchdog>(connection_.store, rank_, world_size_,
                                                     CollectiveWatchdogOptions().timeout(timeout));
  }
  rank_zero_info("lightning-cpp: strategy ddp: ", backend, " process group of ", world_size_, " rank",
                 world_size_ == 1 ? "" : "s", " (", environment_->name(), ", rendezvous ", connection.rendezvous,
                 ", timeout ", timeout.count() / 1000.0, " s)");
}

void DDPStrategy::setup(LightningModule& module) {
  LT_INTERNAL_ASSERT(process_group(), "strategy ddp: setup() before setup_environment()");
  run_state_ = module.runtime().state;
  uneven_join_ = false;
  if (watchdog_) {
    watchdog_->begin_run(module.runtime().state,
                         options_.uneven_inputs() == UnevenInputs::kJoin && options_.join_enable());
  }
  Strategy::setup(module);
  bool trainable = false;
  for (const auto& p : module.parameters()) trainable = trainable || p.requires_grad();
  if (!trainable) {
    ddp_.reset();  // nothing to synchronize (e.g. a frozen model evaluated)
    return;
  }
  std::shared_ptr<torch::nn::Module> holder;
  try {
    holder = module.shared_from_this();
  } catch (const std::bad_weak_ptr&) {
    // Not owned by a shared_ptr: the Trainer keeps it alive for the run.
    holder = std::shared_ptr<torch::nn::Module>(std::shared_ptr<torch::nn::Module>(), &module);
  }
  const std::vector<CollectiveLayer*> layers = collective_layers(module);
  if (!layers.empty() && world_size_ > 1 && !layer_sync_group_) {
    auto scope = watch("rendezvous of the collective layers' process group");
    layer_sync_group_ = new_process_group(connection_, *environment_, "layer_sync");
  }
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->set_process_group(layer_sync_group_, static_cast<int64_t>(i));
  auto scope = watch("broadcast of the initial parameters (DDP setup)");
  // The ranks agree on where a signal stops them through the gradient
  // allreduce (DistributedDataParallel's agreed stop; the epoch contexts read it).
  std::function<bool()> stop_wish;
  if (watchdog_) stop_wish = [] { return interrupt_signal() != 0; };
  ddp_ = std::make_unique<DistributedDataParallel>(holder, process_group(),
                                                   DistributedDataParallelOptions()
                                                       .bucket_cap_mb(options_.bucket_cap_mb())
                                                       .find_unused_parameters(options_.find_unused_parameters())
                                                       .gradient_as_bucket_view(options_.gradient_as_bucket_view())
                                                       .broadcast_buffers(options_.broadcast_buffers())
                                                       .comm_hook(options_.ddp_comm_hook())
                                                       .stop_wish(stop_wish));
  if (!layers.empty()) {
    ddp_->set_forward_shadow([layers] {
      for (CollectiveLayer* layer : layers) layer->shadow_forward();
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) (*it)->shadow_backward();
    });
  }
}

void DDPStrategy::teardown() {
  ddp_.reset();
  run_state_ = nullptr;
  uneven_join_ = false;
  if (watchdog_) watchdog_->end_run();
}

void DDPStrategy::on_train_end() {
  if (watchdog_) watchdog_->finish();
}

std::exception_ptr DDPStrategy::on_exception(const std::exception& e) {
  if (watchdog_) return watchdog_->on_exception(e);
  return std::current_exception();
}

void DDPStrategy::process_dataloader(DataLoader& loader, Stage stage, const TrainerOptions& options) {
  if (!process_group()) return;
  // A loader padded by an earlier run gets its own sampler back first.
  if (const auto* padded = dynamic_cast<const PaddedSampler*>(loader.sampler().get())) {
    loader.set_sampler(padded->inner());
  }
  if (const auto* padded = dynamic_cast<const PaddedBatchSampler*>(loader.batch_sampler().get())) {
    loader.set_batch_sampler(padded->inner());
  }
  if (options.use_distributed_sampler()) shard_dataloader(loader, stage, options_.uneven_inputs(), rank_, world_size_);
  if (stage == Stage::kTrain) {
    balance_training_loader(loader, options_.uneven_inputs(), *this, options.limit_train_batches());
  }
}

torch::Tensor DDPStrategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  if (!ddp_) return Strategy::training_step(module, batch, batch_idx);
  {
    auto scope = watch("DDP forward collectives (Join heartbeat, buffer broadcast)");
    ddp_->pre_forward();
  }
  manual_syncs_ = 0;
  torch::Tensor out = module.training_step(batch, batch_idx);
  // backward() arms the Reducer (as Lightning's manual_backward does), from
  // what backward starts at: the scaled loss and the stop flag.
  auto scope = watch("DDP forward collectives (Join grad-sync flag)");
  ddp_->post_forward({out}, /*prepare_for_backward=*/false);
  return out;
}

void DDPStrategy::backward(const torch::Tensor& loss, LightningModule& module) {
  if (!ddp_) {
    loss.backward();
    return;
  }
  if (!module.automatic_optimization()) {
    // Under uneven Join a joined rank's DDP main hook shadows one gradient
    // reduction per batch; a second one would meet the joined rank's next
    // heartbeat instead (a gloo abort or a hang). Refused before its
    // allreduce; every rank with a batch reaches the same call.
    if (uneven_join_ && ddp_->require_backward_grad_sync() && ++manual_syncs_ > 1) {
      throw Error(c10::str(
          "strategy ddp: manual_backward called a second time in one batch (rank ", rank_, ", epoch ",
          run_state_ != nullptr ? run_state_->current_epoch : 0, ", batch ",
          run_state_ != nullptr ? run_state_->batch_idx : 0,
          ") under Join with uneven inputs: each call reduces the gradients, and a rank that ran out of data shadows "
          "one gradient reduction per batch (what collectives().manual_declared = true declares), so the ranks' "
          "collectives would stop matching. Call manual_backward once per batch (on the sum of the losses), or "
          "train with uneven_inputs: pad (DistributedSampler padding, no Join)"));
    }
  }
  auto scope =
      ddp_->require_backward_grad_sync() ? watch("backward (gradient allreduce)") : CollectiveWatchdog::Scope();
  ddp_->backward(loss);
}

void DDPStrategy::optimizer_step(torch::optim::Optimizer& optimizer) {
  optimizer.step();
  if (ddp_) ddp_->detach_gradient_views();  // before the loop's zero_grad()
}

void DDPStrategy::check_features(const FeatureSet& features) {
  if (options_.uneven_inputs() != UnevenInputs::kJoin || world_size_ == 1) return;
  // Even shards: no rank runs out of data early, Join changes nothing, and
  // nothing needs refusing (a collective: every rank checks the same counts).
  // Unknown counts (streams) may differ: they are checked as uneven ones.
  if (uneven_counts(*this, features.train_batches).empty()) return;
  enforce_join_compatibility(features, options_.join_settings(), rank_);
  uneven_join_ = options_.join_enable();
}

void DDPStrategy::check_matched(const char* collective) const {
  if (!uneven_join_ || run_state_ == nullptr || run_state_->unmatched_hooks == nullptr) return;
  const Callback* callback = run_state_->running_callback;
  throw Error(c10::str("strategy ddp: ", collective, " issued ",
                       callback != nullptr ? c10::str("by callback ", callback->name(), " ") : std::string(), "in ",
                       run_state_->unmatched_hooks, " (rank ", rank_,
                       ", epoch ", run_state_->current_epoch, ", batch ", run_state_->batch_idx,
                       "): the ranks have uneven inputs under Join, and a rank that ran out of data does not run these "
                       "hooks, so it could not match the collective. Issue it in on_after_optimizer_step, an "
                       "optimizer-step hook or at an epoch's end; declare the callback's join_support so that the run "
                       "is refused before the first step; or use uneven_inputs: pad"));
}

std::unique_ptr<TrainingEpochContext> DDPStrategy::training_epoch_context(LightningModule& module,
                                                                          const EpochPlan& plan) {
  if (!ddp_) return Strategy::training_epoch_context(module, plan);
  const DDPEpochParts parts{*this, *ddp_, watchdog_.get()};
  if (options_.uneven_inputs() == UnevenInputs::kJoin) {
    return make_join_epoch_context(parts, module, plan, options_.join_settings());
  }
  return make_no_sync_epoch_context(parts, module, plan);
}

// -- collectives ------------------------------------------------------------------

torch::Tensor DDPStrategy::reduce(const torch::Tensor& tensor, ReduceOp op) {
  if (!process_group()) return tensor;
  check_matched("reduce");
  torch::Tensor t = tensor.detach().to(device_).clone().contiguous();
  if (op == ReduceOp::kMean && !t.is_floating_point()) t = t.to(torch::kDouble);
  c10d::AllreduceOptions opts;
  opts.reduceOp = op == ReduceOp::kMin ? c10d::ReduceOp::MIN : op == ReduceOp::kMax ? c10d::ReduceOp::MAX
                                                                                     : c10d::ReduceOp::SUM;
  std::vector<torch::Tensor> tensors{t};
  auto scope = watch("allreduce (strategy reduce)");
  process_group()->allreduce(tensors, opts)->wait();
  if (op == ReduceOp::kMean) t.div_(static_cast<double>(world_size_));
  return t.to(tensor.device());
}

torch::Tensor DDPStrategy::all_gather(const torch::Tensor& tensor) {
  if (!process_group()) return Strategy::all_gather(tensor);
  check_matched("all_gather");
  torch::Tensor t = tensor.detach().to(device_).contiguous();
  // Shapes first: a mismatch is an error on every rank instead of a hang.
  constexpr int64_t kMaxDims = 8;
  torch::Tensor shape = torch::full({kMaxDims + 1}, -1, torch::TensorOptions().dtype(torch::kLong));
  shape[0] = t.dim() <= kMaxDims ? t.dim() : -1;
  for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kMaxDims); ++d) shape[d + 1] = t.size(d);
  shape = shape.to(device_);
  std::vector<std::vector<torch::Tensor>> shapes_out(1);
  for (int64_t r = 0; r < world_size_; ++r) shapes_out[0].push_back(torch::empty_like(shape));
  std::vector<torch::Tensor> shape_in{shape};
  auto scope = watch("allgather (strategy all_gather)");
  process_group()->allgather(shapes_out, shape_in)->wait();
  for (int64_t r = 0; r < world_size_; ++r) {
    LT_CHECK(shapes_out[0][r][0].item<int64_t>() >= 0 && shapes_out[0][r].equal(shape),
             "strategy ddp: all_gather needs the same shape (at most ", kMaxDims, " dimensions) on every rank; rank ",
             rank_, " has ", t.sizes(), ", rank ", r, " differs");
  }
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int64_t r = 0; r < world_size_; ++r) out[0].push_back(torch::empty_like(t));
  std::vector<torch::Tensor> in{t};
  process_group()->allgather(out, in)->wait();
  return torch::stack(out[0]).to(tensor.device());
}

std::vector<std::string> DDPStrategy::all_gather_bytes(const std::string& bytes) {
  if (!process_group()) return Strategy::all_gather_bytes(bytes);
  // The sizes, then every rank's bytes padded to the longest.
  const torch::Tensor sizes = all_gather(torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong)).flatten();
  const int64_t longest = std::max<int64_t>(1, sizes.max().item<int64_t>());  // gloo: no empty tensors
  torch::Tensor mine = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
  const torch::Tensor all = all_gather(mine).cpu().contiguous();
  std::vector<std::string> out;
  for (int64_t r = 0; r < world_size_; ++r) {
    const auto* data = static_cast<const char*>(all[r].data_ptr());
    out.emplace_back(data, static_cast<size_t>(sizes[r].item<int64_t>()));
  }
  return out;
}

torch::Tensor DDPStrategy::broadcast(const torch::Tensor& tensor, int64_t src) {
  if (!process_group()) return tensor;
  check_matched("broadcast");
  LT_CHECK(src >= 0 && src < world_size_, "strategy ddp: broadcast from rank ", src, " but the world size is ",
           world_size_);
  torch::Tensor t = tensor.detach().to(device_).clone().contiguous();
  c10d::BroadcastOptions opts;
  opts.rootRank = src;
  std::vector<torch::Tensor> tensors{t};
  auto scope = watch("broadcast (strategy broadcast)");
  process_group()->broadcast(tensors, opts)->wait();
  return t.to(tensor.device());
}

void DDPStrategy::barrier(const std::string& /*name*/) {
  if (!process_group()) return;
  check_matched("barrier");
  auto scope = watch("barrier");
  process_group()->barrier()->wait();
}

bool DDPStrategy::reduce_boolean_decision(bool decision, bool all) {
  if (!process_group()) return decision;
  const int64_t sum = reduce(torch::tensor({decision ? 1 : 0}, torch::kLong), ReduceOp::kSum).item<int64_t>();
  return all ? sum == world_size_ : sum > 0;
}

}  // namespace lt
