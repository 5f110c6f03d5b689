#include <lightning_cpp/plugins/strategies/parallel.h>

#include <algorithm>
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
#include <lightning_cpp/plugins/environments/local.h>
#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/plugins/launchers/worker_process.h>
#include <lightning_cpp/plugins/distributed/rank_agreement.h>
#include <lightning_cpp/plugins/join/epoch_context.h>

namespace lt {

ParallelStrategy::ParallelStrategy() = default;

ParallelStrategy::~ParallelStrategy() = default;

int64_t ParallelStrategy::local_rank() const {
  if (environment_) return local_rank_;
  return select_cluster_environment()->local_rank();
}

void ParallelStrategy::setup_environment(const TrainerOptions& options) {
  trainer_values_ = options.rank_agreed_options();
  if (process_group()) return;  // fit, then validate/test: one process group per process
  const ParallelSettings settings = parallel_settings();
  LT_CHECK_VALUE(options.devices() >= 1, who(), ": devices must be >= 1, got ", options.devices());
  LT_CHECK_VALUE(options.num_nodes() >= 1, who(), ": num_nodes must be >= 1, got ", options.num_nodes());
  // Fail before launching anything.
  const std::string backend =
      resolve_process_group_backend(settings.process_group_backend, options.device_type(), options.accelerator(), who());
  environment_ = select_cluster_environment();
  const int64_t expected = options.devices() * options.num_nodes();
  if (!environment_->creates_processes_externally()) {
    if (expected > 1) configure_launcher(options)->launch();
  } else if (expected == 1 && environment_->world_size() > 1) {
    // devices and num_nodes left at 1: the launcher's layout is the run's.
    rank_zero_info(program_name(), ": ", who(), ": the ", environment_->name(), " environment has ",
                   environment_->world_size(), " ranks; devices: 1 and num_nodes: 1 follow it");
  } else {
    LT_CHECK_VALUE(environment_->world_size() == expected, who(), ": devices (", options.devices(),
                   ") * num_nodes (", options.num_nodes(), ") = ", expected, ", but the ", environment_->name(),
                   " environment has a world size of ", environment_->world_size(), "; make them agree");
  }
  rank_ = environment_->global_rank();
  local_rank_ = environment_->local_rank();
  node_rank_ = environment_->node_rank();
  world_size_ = environment_->world_size();
  if (options.device_type() == torch::kCUDA) {
    LT_CHECK_VALUE(torch::cuda::is_available(), who(), ": accelerator ", options.accelerator(),
                   " but CUDA is not available in this LibTorch/machine");
    LT_CHECK_VALUE(local_rank_ < static_cast<int64_t>(torch::cuda::device_count()), who(), ": local rank ",
                   local_rank_, " has no CUDA device (", torch::cuda::device_count(), " visible)");
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank_));
    set_current_device(device_);  // before any CUDA work: NCCL's communicator is made on the current device
  } else {
    device_ = torch::kCPU;
  }
  const std::chrono::milliseconds timeout = settings.process_group_timeout;
  DistributedConnection connection = init_process_group(*environment_, backend, timeout);
  connection_ = connection;
  if (world_size_ > 1) {
    configure_worker_process(
        environment_->local_world_size().value_or(world_size_ / std::max<int64_t>(options.num_nodes(), 1)));
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        connection_.store, rank_, world_size_,
        CollectiveWatchdogOptions().timeout(timeout).hosts_store(connection_.hosts_store));
  }
  rank_zero_info(program_name(), ": ", who(), ": ", backend, " process group of ", world_size_, " rank",
                 world_size_ == 1 ? "" : "s", " (", environment_->name(), ", rendezvous ", connection.rendezvous,
                 ", timeout ", timeout.count() / 1000.0, " s)");
}

std::unique_ptr<Launcher> ParallelStrategy::configure_launcher(const TrainerOptions& options) const {
  const auto* local = dynamic_cast<const LocalEnvironment*>(environment_.get());
  LT_INTERNAL_ASSERT(local != nullptr, who(), ": no launcher for the ", environment_->name(), " environment");
  const ParallelSettings settings = parallel_settings();
  const LocalEnvironment::Nodes nodes = local->nodes(options.num_nodes(), who());
  LocalSpawnOptions spawn;
  spawn.timeout = settings.launch_timeout;
  spawn.worker_log_dir = settings.worker_log_dir;
  spawn.num_nodes = nodes.num_nodes;
  spawn.node_rank = nodes.node_rank;
  spawn.main_address = nodes.main_address;
  spawn.main_port = nodes.main_port;
  spawn.who = who();
  return std::make_unique<SubprocessScriptLauncher>(options.devices(), std::move(spawn));
}

void ParallelStrategy::on_run_start(const RunState& state) {
  LT_INTERNAL_ASSERT(process_group(), who(), ": on_run_start() before setup_environment()");
  run_state_ = &state;
  uneven_join_ = false;
  if (watchdog_) {
    const ParallelSettings settings = parallel_settings();
    watchdog_->begin_run(&state, settings.uneven_inputs == UnevenInputs::kJoin && settings.join.enable);
  }
}

void ParallelStrategy::check_ranks_agree(const LightningModule& module) {
  OptionValues values = version_values();
  values.emplace_back("strategy", name());
  for (auto& [option, value] : option_values()) {
    if (option == "launch_timeout" || option == "worker_log_dir" || option == "process_group_timeout") continue;
    values.emplace_back("strategy." + option, std::move(value));
  }
  values.insert(values.end(), trainer_values_.begin(), trainer_values_.end());
  values.emplace_back("precision", precision().name());
  const OptionValues model = module_values(module);
  values.insert(values.end(), model.begin(), model.end());
  lt::check_ranks_agree(*this, values);  // through reduce and all_gather_bytes, watched as every collective
}

void ParallelStrategy::setup(LightningModule& module) {
  LT_INTERNAL_ASSERT(process_group(), who(), ": setup() before setup_environment()");
  if (world_size_ > 1) check_ranks_agree(module);
  Strategy::setup(module);
  bool trainable = false;
  for (const auto& p : module.parameters()) trainable = trainable || p.requires_grad();
  if (!trainable) {
    sync_.reset();  // nothing to synchronize (e.g. a frozen model evaluated)
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
  auto scope = watch("broadcast of the initial parameters (gradient sync setup)");
  // The ranks may agree on where a signal stops them through the gradient
  // reduction (GradientSync::take_agreed_stop; the epoch contexts read it).
  std::function<bool()> stop_wish;
  if (watchdog_) stop_wish = [] { return interrupt_signal() != 0; };
  sync_ = make_gradient_sync(holder, process_group(), std::move(stop_wish));
  LT_INTERNAL_ASSERT(sync_ != nullptr, who(), ": make_gradient_sync returned null");
  if (!layers.empty()) {
    sync_->set_forward_shadow([layers] {
      for (CollectiveLayer* layer : layers) layer->shadow_forward();
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) (*it)->shadow_backward();
    });
  }
}

void ParallelStrategy::teardown() {
  sync_.reset();
  run_state_ = nullptr;
  uneven_join_ = false;
  if (watchdog_) watchdog_->end_run();
}

void ParallelStrategy::on_train_end() {
  if (watchdog_) watchdog_->finish();
}

std::exception_ptr ParallelStrategy::on_exception(const std::exception& e) {
  if (watchdog_) return watchdog_->on_exception(e);
  return std::current_exception();
}

void ParallelStrategy::add_joinable(std::shared_ptr<Joinable> joinable) {
  LT_CHECK(joinable != nullptr, who(), ": add_joinable: null");
  joinables_.push_back(std::move(joinable));
}

void ParallelStrategy::process_dataloader(DataLoader& loader, Stage stage, const TrainerOptions& options) {
  if (!process_group()) return;
  const UnevenInputs uneven_inputs = parallel_settings().uneven_inputs;
  // A loader padded by an earlier run gets its own sampler back first.
  if (const auto* padded = dynamic_cast<const PaddedSampler*>(loader.sampler().get())) {
    loader.set_sampler(padded->inner());
  }
  if (const auto* padded = dynamic_cast<const PaddedBatchSampler*>(loader.batch_sampler().get())) {
    loader.set_batch_sampler(padded->inner());
  }
  if (options.use_distributed_sampler()) shard_dataloader(loader, stage, uneven_inputs, rank_, world_size_, who());
  if (stage == Stage::kTrain) balance_training_loader(loader, uneven_inputs, *this, options.limit_train_batches());
}

void ParallelStrategy::before_forward(LightningModule& /*module*/) {
  manual_syncs_ = 0;
  if (!sync_) return;
  auto scope = watch("forward collectives (Join heartbeat, buffer broadcast)");
  sync_->before_forward();
}

void ParallelStrategy::after_forward(LightningModule& /*module*/, const torch::Tensor& output) {
  if (!sync_) return;
  // backward() arms the gradient reduction (as Lightning's manual_backward
  // does), from what backward starts at: the scaled loss.
  auto scope = watch("forward collectives (Join grad-sync flag)");
  sync_->after_forward({output});
}

void ParallelStrategy::backward(const torch::Tensor& loss, LightningModule& module) {
  if (!sync_) {
    loss.backward();
    return;
  }
  if (!module.automatic_optimization()) {
    // Under uneven Join a joined rank's main hook shadows one gradient
    // reduction per batch; a second one would meet the joined rank's next
    // heartbeat instead (a gloo abort or a hang). Refused before its
    // reduction; every rank with a batch reaches the same call.
    if (uneven_join_ && sync_->require_backward_grad_sync() && ++manual_syncs_ > 1) {
      throw Error(c10::str(
          who(), ": manual_backward called a second time in one batch (rank ", rank_, ", epoch ",
          run_state_ != nullptr ? run_state_->current_epoch : 0, ", batch ",
          run_state_ != nullptr ? run_state_->batch_idx : 0,
          ") under Join with uneven inputs: each call reduces the gradients, and a rank that ran out of data shadows "
          "one gradient reduction per batch (what collectives().manual_declared = true declares), so the ranks' "
          "collectives would stop matching. Call manual_backward once per batch (on the sum of the losses), or "
          "train with uneven_inputs: pad (DistributedSampler padding, no Join)"));
    }
  }
  auto scope =
      sync_->require_backward_grad_sync() ? watch("backward (gradient allreduce)") : CollectiveWatchdog::Scope();
  sync_->backward(loss);
}

void ParallelStrategy::release_gradients() {
  if (sync_) sync_->release_gradients();
}

void ParallelStrategy::after_optimizer_step() {
  if (!sync_) return;
  auto scope = watch("after the optimizer step (the gradient sync's gather of the shards)");
  sync_->after_optimizer_step();
}

void ParallelStrategy::check_features(const FeatureSet& features) {
  uneven_join_ = false;
  const ParallelSettings settings = parallel_settings();
  if (settings.uneven_inputs != UnevenInputs::kJoin || world_size_ == 1) return;
  // Even shards: no rank runs out of data early, Join changes nothing, and
  // nothing needs refusing (a collective: every rank checks the same counts).
  // Unknown counts (streams) may differ: they are checked as uneven ones.
  if (uneven_counts(*this, features.train_batches).empty()) return;
  enforce_join_compatibility(features, settings.join, rank_);
  uneven_join_ = settings.join.enable;
}

void ParallelStrategy::check_matched(const char* collective) const {
  if (!uneven_join_ || run_state_ == nullptr || run_state_->unmatched_hooks == nullptr) return;
  const Callback* callback = run_state_->running_callback;
  throw Error(c10::str(who(), ": ", collective, " issued ",
                       callback != nullptr ? c10::str("by callback ", callback->name(), " ") : std::string(), "in ",
                       run_state_->unmatched_hooks, " (rank ", rank_,
                       ", epoch ", run_state_->current_epoch, ", batch ", run_state_->batch_idx,
                       "): the ranks have uneven inputs under Join, and a rank that ran out of data does not run these "
                       "hooks, so it could not match the collective. ",
                       run_state_->unmatched_fix != nullptr
                           ? run_state_->unmatched_fix
                           : "Issue it in on_after_optimizer_step, an optimizer-step hook or at an epoch's end; declare "
                             "the callback's join_support so that the run is refused before the first step; or use "
                             "uneven_inputs: pad"));
}

std::unique_ptr<TrainingEpochContext> ParallelStrategy::training_epoch_context(LightningModule& module,
                                                                               const EpochPlan& plan) {
  if (!sync_) return Strategy::training_epoch_context(module, plan);
  EpochParts parts{*this, *sync_, watchdog_.get(), {}};
  for (const auto& joinable : joinables_) parts.joinables.push_back(joinable.get());
  const ParallelSettings settings = parallel_settings();
  if (settings.uneven_inputs == UnevenInputs::kJoin) {
    return make_join_epoch_context(std::move(parts), module, plan, settings.join);
  }
  return make_no_sync_epoch_context(std::move(parts), plan);
}

// -- collectives ------------------------------------------------------------------

c10::intrusive_ptr<c10d::ProcessGroup> ParallelStrategy::new_group(const std::string& name,
                                                                   const std::vector<int64_t>& ranks) const {
  auto scope = watch("rendezvous of a process group of some ranks");
  return new_process_group(connection_, *environment_, name, ranks);
}

WatchedCollectives ParallelStrategy::collectives() const {
  return WatchedCollectives{process_group(), device_, watchdog_.get(), who()};
}

torch::Tensor ParallelStrategy::reduce(const torch::Tensor& tensor, ReduceOp op) {
  if (!process_group()) return tensor;
  check_matched("reduce");
  return collectives().reduce(tensor, op);
}

torch::Tensor ParallelStrategy::all_gather(const torch::Tensor& tensor) {
  if (!process_group()) return Strategy::all_gather(tensor);
  check_matched("all_gather");
  return collectives().all_gather(tensor);
}

std::vector<std::string> ParallelStrategy::all_gather_bytes(const std::string& bytes) {
  if (!process_group()) return Strategy::all_gather_bytes(bytes);
  check_matched("all_gather");
  return collectives().all_gather_bytes(bytes);
}

torch::Tensor ParallelStrategy::broadcast(const torch::Tensor& tensor, int64_t src) {
  if (!process_group()) return tensor;
  check_matched("broadcast");
  return collectives().broadcast(tensor, src);
}

void ParallelStrategy::barrier(const std::string& /*name*/) {
  if (!process_group()) return;
  check_matched("barrier");
  collectives().barrier();
}

bool ParallelStrategy::reduce_boolean_decision(bool decision, bool all) {
  if (!process_group()) return decision;
  check_matched("reduce");
  return collectives().reduce_boolean_decision(decision, all);
}

}  // namespace lt
