#include <lightning_cpp/plugins/strategies/ddp.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

// ProcessGroupGloo.hpp declares nothing unless USE_C10D_GLOO is defined (as
// LibTorch's own build does); gloo's headers come with LibTorch (or libgloo-dev).
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#if defined(LT_WITH_NCCL) && LT_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/run_state.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/distributed_sampler.h>
#include <lightning_cpp/plugins/environments/local.h>
#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/plugins/strategies/ddp/join_context.h>

namespace lt {

namespace {

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// The local IPv4 address this host uses to reach `host` (a UDP "connect"
// sends nothing; it only selects the route). Empty when it cannot tell.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port > 0 ? port : 9).c_str(), &hints, &result) != 0) return {};
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && result != nullptr && ::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) {
      out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(result);
  return out;
}

// Gloo's transport device: GLOO_SOCKET_IFNAME if set (as in PyTorch); the
// loopback device for a local spawn or a loopback MASTER_ADDR; otherwise the
// address of the interface that routes to MASTER_ADDR, so multi-node runs
// work without naming an interface.
std::shared_ptr<::gloo::transport::Device> gloo_device(const ClusterEnvironment& environment) {
  if (auto ifname = env::get("GLOO_SOCKET_IFNAME")) {
    const std::string first = ifname->substr(0, ifname->find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  if (environment.name() == "local" || is_loopback(environment.main_address())) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  const std::string local = local_address_towards(environment.main_address(), environment.main_port());
  if (!local.empty()) return c10d::ProcessGroupGloo::createDeviceForHostname(local);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// Distinct store prefixes for the process groups one process creates, so a
// second Trainer in the same workers (same MASTER_PORT) gets a fresh rendezvous.
std::atomic<int> g_process_group_count{0};

// The effective number of batches `rank` runs with `sampler`.
int64_t batches_for_rank(const DistributedSampler& sampler, int64_t rank, const DataLoaderOptions& loader) {
  const int64_t n = sampler.num_samples_for_rank(rank), b = loader.batch_size();
  return loader.drop_last() ? n / b : (n + b - 1) / b;
}

class NoSyncBatchGuard : public BatchGuard {
 public:
  explicit NoSyncBatchGuard(DistributedDataParallel& ddp) : guard_(ddp.no_sync()) {}

 private:
  DistributedDataParallel::NoSyncGuard guard_;
};

// Gradients are reduced only on the micro-batch that ends an accumulation
// window (sync_gradients == true); the others run under no_sync. Every rank
// runs the same iterations, so each issues the same collectives.
class NoSyncEpochContext : public TrainingEpochContext {
 public:
  NoSyncEpochContext(EpochPlan plan, DDPStrategy& strategy, const RunState* state)
      : TrainingEpochContext(plan), strategy_(strategy), ddp_(*strategy.ddp()), state_(state) {}
  std::unique_ptr<BatchGuard> batch(int64_t /*iteration*/, bool sync_gradients) override {
    if (sync_gradients) return nullptr;
    return std::make_unique<NoSyncBatchGuard>(ddp_);
  }
  // The ranks run in lockstep: they agree through the store on the step to stop at.
  bool stop_requested(bool local) override {
    return strategy_.agree_stop(local, state_ != nullptr ? state_->global_step : 0, /*lockstep=*/true, /*sync=*/true);
  }

 private:
  DDPStrategy& strategy_;
  DistributedDataParallel& ddp_;
  const RunState* state_;
};

}  // namespace

DDPStrategy::DDPStrategy(DDPStrategyOptions options) : options_(std::move(options)) {
  LT_CHECK_VALUE(options_.process_group_timeout().count() > 0, "strategy ddp: process_group_timeout must be > 0");
  LT_CHECK_VALUE(options_.bucket_cap_mb() > 0, "strategy ddp: bucket_cap_mb must be > 0, got ",
                 options_.bucket_cap_mb());
  LT_CHECK_VALUE(options_.launch_timeout().count() >= 0, "strategy ddp: launch_timeout must be >= 0");
}

DDPStrategy::~DDPStrategy() = default;

int64_t DDPStrategy::local_rank() const {
  if (environment_) return local_rank_;
  return select_cluster_environment()->local_rank();
}

std::string DDPStrategy::resolve_backend(const TrainerOptions& options) const {
  const bool cuda = options.device_type() == torch::kCUDA;
  std::string backend = options_.process_group_backend();
  if (backend.empty()) backend = cuda ? "nccl" : "gloo";
  LT_CHECK_VALUE(backend == "gloo" || backend == "nccl", "strategy ddp: process_group_backend must be gloo or nccl, got '",
                 backend, "'");
  if (backend == "nccl") {
#if !(defined(LT_WITH_NCCL) && LT_WITH_NCCL)
    LT_CHECK_VALUE(false,
                   "strategy ddp: process_group_backend nccl is not available in this build (LibTorch without CUDA, "
                   "or no NCCL headers when lightning-cpp was built); use gloo with accelerator cpu, or rebuild "
                   "against a CUDA LibTorch with NCCL");
#endif
    LT_CHECK_VALUE(cuda, "strategy ddp: process_group_backend nccl needs accelerator cuda, got accelerator '",
                   options.accelerator(), "'");
  }
  return backend;
}

void DDPStrategy::setup_environment(const TrainerOptions& options) {
  uneven_inputs_ = options.uneven_inputs();
  join_enable_ = options.join_enable();
  if (process_group_) return;  // fit, then validate/test: one process group per process
  LT_CHECK_VALUE(options.devices() >= 1, "strategy ddp: devices must be >= 1, got ", options.devices());
  LT_CHECK_VALUE(options.num_nodes() >= 1, "strategy ddp: num_nodes must be >= 1, got ", options.num_nodes());
  const std::string backend = resolve_backend(options);  // fail before launching anything
  environment_ = select_cluster_environment();
  const int64_t expected = options.devices() * options.num_nodes();
  if (!environment_->creates_processes_externally()) {
    LT_CHECK_VALUE(options.num_nodes() == 1, "strategy ddp: num_nodes=", options.num_nodes(),
                   " needs ranks started by a cluster launcher (torchrun, srun, mpirun); none was found in the ",
                   "environment, and a local spawn starts processes on this machine only");
    if (options.devices() > 1) launch_local_workers(options.devices());
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
  init_process_group(backend);
}

void DDPStrategy::launch_local_workers(int64_t num_processes) {
  install_forwarding_signal_handlers();
  const int port = find_free_port();
  const std::vector<std::string> argv = self_argv();
  std::string store_dir = (std::filesystem::temp_directory_path() / "lightning-cpp-XXXXXX").string();
  LT_CHECK(::mkdtemp(store_dir.data()) != nullptr, "strategy ddp: cannot create a directory for the local store in ",
           std::filesystem::temp_directory_path().string(), ": ", std::strerror(errno));
  if (!options_.worker_log_dir().empty()) std::filesystem::create_directories(options_.worker_log_dir());
  std::vector<WorkerSpec> workers;
  for (int64_t rank = 0; rank < num_processes; ++rank) {
    WorkerSpec spec;
    spec.argv = argv;
    spec.env = {{LocalEnvironment::kWorkerVar, "1"},
                {"RANK", std::to_string(rank)},
                {"LOCAL_RANK", std::to_string(rank)},
                {"WORLD_SIZE", std::to_string(num_processes)},
                {"LOCAL_WORLD_SIZE", std::to_string(num_processes)},
                {"NODE_RANK", "0"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)},
                {LocalEnvironment::kStoreVar, store_dir + "/store"}};
    if (!options_.worker_log_dir().empty()) {
      spec.output_path = (std::filesystem::path(options_.worker_log_dir()) / ("rank" + std::to_string(rank) + ".log"))
                             .string();
    }
    workers.push_back(std::move(spec));
  }
  std::fprintf(stderr, "lightning-cpp: strategy ddp: launching %lld worker processes (store %s/store)\n",
               static_cast<long long>(num_processes), store_dir.c_str());
  std::fflush(stderr);
  LaunchOptions launch;
  launch.timeout = options_.launch_timeout();
  const std::vector<WorkerExit> exits = launch_and_wait(workers, launch);
  std::error_code ignored;
  std::filesystem::remove_all(store_dir, ignored);

  // The root cause: the first worker that failed by itself (not one the
  // launcher terminated after it).
  int code = 0;
  for (size_t rank = 0; rank < exits.size() && code == 0; ++rank) {
    const WorkerExit& e = exits[rank];
    if (e.ok() || e.terminated) continue;
    std::fprintf(stderr, "lightning-cpp: strategy ddp: rank %zu of %zu %s", rank, exits.size(), e.describe().c_str());
    if (!options_.worker_log_dir().empty()) {
      std::fprintf(stderr, " (its output: %s/rank%zu.log)", options_.worker_log_dir().c_str(), rank);
    }
    std::fprintf(stderr, "; the other workers were stopped\n");
    code = e.timed_out ? 124 : e.signal != 0 ? 128 + e.signal : (e.exit_code > 0 && e.exit_code < 256 ? e.exit_code : 1);
  }
  std::fflush(stderr);
  std::fflush(stdout);
  // The supervisor's work is done; the run happened in the workers.
  std::exit(code);
}

void DDPStrategy::init_process_group(const std::string& backend) {
  const std::chrono::milliseconds timeout = options_.process_group_timeout();
  const int index = g_process_group_count.fetch_add(1);
  c10::intrusive_ptr<c10d::Store> base;
  const auto local_store = env::get(LocalEnvironment::kStoreVar);
  std::string rendezvous = c10::str(environment_->main_address(), ":", environment_->main_port());
  if (world_size_ == 1) {
    base = c10::make_intrusive<c10d::HashStore>();
  } else if (environment_->name() == "local" && local_store) {
    base = c10::make_intrusive<c10d::FileStore>(*local_store, -1);  // -1: the supervisor removes it
    base->setTimeout(timeout);
    rendezvous = *local_store;
  } else {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(environment_->main_port());
    store_options.isServer = rank_ == 0;
    store_options.numWorkers = static_cast<size_t>(world_size_);
    store_options.waitWorkers = index == 0;  // later groups reuse the server every rank already joined
    store_options.timeout = timeout;
    store_options.multiTenant = true;  // a second Trainer in this process reuses the server
    base = c10::make_intrusive<c10d::TCPStore>(environment_->main_address(), store_options);
  }
  store_ = c10::make_intrusive<c10d::PrefixStore>("lt_pg_" + std::to_string(index), base);
  if (backend == "gloo") {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo_options->devices.push_back(gloo_device(*environment_));
    gloo_options->threads = 2;  // PyTorch: 2 per device
    process_group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, static_cast<int>(rank_),
                                                                 static_cast<int>(world_size_), gloo_options);
  } else {
#if defined(LT_WITH_NCCL) && LT_WITH_NCCL
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = timeout;
    process_group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, static_cast<int>(rank_),
                                                                 static_cast<int>(world_size_), nccl_options);
#endif
  }
  if (world_size_ > 1) {
    // A peer that died makes gloo's next send hit a closed socket: let that
    // be an EPIPE error the watchdog reports, not a SIGPIPE that kills this
    // rank silently (Python, and so PyTorch's DDP, ignores SIGPIPE too).
    std::signal(SIGPIPE, SIG_IGN);
    watchdog_ = std::make_unique<CollectiveWatchdog>(store_, rank_, world_size_,
                                                     CollectiveWatchdogOptions().timeout(timeout));
  }
  rank_zero_info("lightning-cpp: strategy ddp: ", backend, " process group of ", world_size_, " rank",
                 world_size_ == 1 ? "" : "s", " (", environment_->name(), ", rendezvous ", rendezvous, ", timeout ",
                 timeout.count() / 1000.0, " s)");
}

void DDPStrategy::setup(LightningModule& module) {
  LT_INTERNAL_ASSERT(process_group_, "strategy ddp: setup() before setup_environment()");
  if (watchdog_) watchdog_->begin_run(module.runtime().state, uneven_inputs_ == UnevenInputs::kJoin && join_enable_);
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
  auto scope = watch("broadcast of the initial parameters (DDP setup)");
  ddp_ = std::make_unique<DistributedDataParallel>(holder, process_group_,
                                                   DistributedDataParallelOptions()
                                                       .bucket_cap_mb(options_.bucket_cap_mb())
                                                       .find_unused_parameters(options_.find_unused_parameters())
                                                       .gradient_as_bucket_view(options_.gradient_as_bucket_view())
                                                       .broadcast_buffers(options_.broadcast_buffers()));
}

void DDPStrategy::teardown() {
  ddp_.reset();
  if (watchdog_) watchdog_->end_run();
}

void DDPStrategy::on_train_end() {
  if (watchdog_) watchdog_->finish();
}

std::exception_ptr DDPStrategy::on_exception(const std::exception& e) {
  if (watchdog_) return watchdog_->on_exception(e);
  return std::current_exception();
}

bool DDPStrategy::agree_stop(bool local, int64_t step, bool lockstep, bool sync) {
  if (!watchdog_) return local;
  return watchdog_->agree_stop(local, step, lockstep, sync);
}

void DDPStrategy::process_dataloader(DataLoader& loader, Stage stage, const TrainerOptions& options) {
  if (!process_group_) return;
  const Sampler* current = loader.sampler().get();
  const bool replaceable = dynamic_cast<const SequentialSampler*>(current) != nullptr ||
                           dynamic_cast<const RandomSampler*>(current) != nullptr ||
                           dynamic_cast<const DistributedSampler*>(current) != nullptr;
  if (!replaceable) {
    rank_zero_warn("strategy ddp: the ", stage_name(stage),
                   " loader has a custom sampler; it is used as is, so it must give each rank its own shard");
    return;
  }
  const int64_t n = loader.dataset()->size();
  auto sampler_options = DistributedSamplerOptions(world_size_, rank_)
                             .shuffle(loader.options().shuffle())
                             .seed(loader.options().seed())
                             .drop_last(false);
  if (stage == Stage::kTrain) {
    sampler_options.pad(options.uneven_inputs() == UnevenInputs::kPad);
    loader.set_sampler(std::make_shared<DistributedSampler>(n, sampler_options));
    if (options.uneven_inputs() == UnevenInputs::kError) {
      check_even_batches(options.limit_train_batches().apply(loader.size()));
    }
    return;
  }
  sampler_options.pad(false);
  if (stage == Stage::kValidate || stage == Stage::kTest) {
    // Every rank must run as many evaluation batches as the others, or the
    // sync_dist reductions would not match. Each rank can tell from (n,
    // world size, batch size) alone, so they all decide alike.
    const DistributedSampler probe(n, sampler_options);
    const FractionOrCount& limit = stage == Stage::kTest ? options.limit_test_batches() : options.limit_val_batches();
    const int64_t first = limit.apply(batches_for_rank(probe, 0, loader.options()));
    bool even = true;
    for (int64_t r = 1; r < world_size_; ++r) even = even && limit.apply(batches_for_rank(probe, r, loader.options())) == first;
    if (!even) {
      sampler_options.pad(true);
      rank_zero_warn("strategy ddp: ", n, " ", stage_name(stage), " samples in batches of ", loader.options().batch_size(),
                     " would give the ", world_size_, " ranks different numbers of batches; padding the shards ",
                     "(a few samples are evaluated twice)");
    }
  }
  loader.set_sampler(std::make_shared<DistributedSampler>(n, sampler_options));
}

void DDPStrategy::check_even_batches(int64_t local_batches) {
  const torch::Tensor counts = all_gather(torch::tensor({local_batches}, torch::kLong)).flatten();
  bool even = true;
  std::string listing;
  for (int64_t r = 0; r < counts.size(0); ++r) {
    const int64_t c = counts[r].item<int64_t>();
    even = even && c == local_batches;
    listing += c10::str(r == 0 ? "" : ", ", "rank ", r, ": ", c);
  }
  LT_CHECK_VALUE(even, "uneven_inputs: error: the ranks would run different numbers of training batches per epoch (",
                 listing, "); use uneven_inputs: pad (repeat samples so shards are even) or join, or make the ",
                 "dataset size a multiple of world_size * batch_size");
}

torch::Tensor DDPStrategy::training_step(LightningModule& module, const Batch& batch, int64_t batch_idx) {
  if (!ddp_) return Strategy::training_step(module, batch, batch_idx);
  {
    auto scope = watch("DDP forward collectives (Join heartbeat, buffer broadcast)");
    ddp_->pre_forward();
  }
  torch::Tensor out = module.training_step(batch, batch_idx);
  // Manual optimization calls manual_backward inside training_step, before
  // this point: backward() arms the Reducer then, as Lightning does.
  auto scope = watch("DDP forward collectives (Join grad-sync flag)");
  ddp_->post_forward({out}, /*prepare_for_backward=*/module.automatic_optimization());
  return out;
}

void DDPStrategy::backward(const torch::Tensor& loss, LightningModule& module) {
  if (ddp_ && !module.automatic_optimization()) ddp_->prepare_for_backward({loss});
  auto scope = ddp_ && ddp_->require_backward_grad_sync() ? watch("backward (gradient allreduce)")
                                                          : CollectiveWatchdog::Scope();
  loss.backward();
}

void DDPStrategy::optimizer_step(torch::optim::Optimizer& optimizer) {
  optimizer.step();
  if (ddp_) ddp_->detach_gradient_views();  // before the loop's zero_grad()
}

std::unique_ptr<TrainingEpochContext> DDPStrategy::no_sync_epoch_context(LightningModule& module,
                                                                         const EpochPlan& plan) {
  LT_CHECK(ddp_ != nullptr, "strategy ddp: no module is wrapped (setup() not called or no trainable parameters)");
  return std::make_unique<NoSyncEpochContext>(plan, *this, module.runtime().state);
}

std::unique_ptr<TrainingEpochContext> DDPStrategy::join_epoch_context(LightningModule& module,
                                                                      const EpochPlan& plan) {
  return make_ddp_join_epoch_context(*this, module, plan);
}

void DDPStrategy::check_features(const FeatureSet& features) {
  if (uneven_inputs_ == UnevenInputs::kJoin && features.options != nullptr) {
    enforce_join_compatibility(features, join_settings(*features.options), rank_);
  }
}

std::unique_ptr<TrainingEpochContext> DDPStrategy::training_epoch_context(LightningModule& module,
                                                                          const EpochPlan& plan) {
  if (!ddp_) return Strategy::training_epoch_context(module, plan);
  if (uneven_inputs_ == UnevenInputs::kJoin) return join_epoch_context(module, plan);
  return no_sync_epoch_context(module, plan);
}

// -- collectives ------------------------------------------------------------------

torch::Tensor DDPStrategy::reduce(const torch::Tensor& tensor, ReduceOp op) {
  if (!process_group_) return tensor;
  torch::Tensor t = tensor.detach().to(device_).clone().contiguous();
  if (op == ReduceOp::kMean && !t.is_floating_point()) t = t.to(torch::kDouble);
  c10d::AllreduceOptions opts;
  opts.reduceOp = op == ReduceOp::kMin ? c10d::ReduceOp::MIN : op == ReduceOp::kMax ? c10d::ReduceOp::MAX
                                                                                     : c10d::ReduceOp::SUM;
  std::vector<torch::Tensor> tensors{t};
  auto scope = watch("allreduce (strategy reduce)");
  process_group_->allreduce(tensors, opts)->wait();
  if (op == ReduceOp::kMean) t.div_(static_cast<double>(world_size_));
  return t.to(tensor.device());
}

torch::Tensor DDPStrategy::all_gather(const torch::Tensor& tensor) {
  if (!process_group_) return Strategy::all_gather(tensor);
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
  process_group_->allgather(shapes_out, shape_in)->wait();
  for (int64_t r = 0; r < world_size_; ++r) {
    LT_CHECK(shapes_out[0][r][0].item<int64_t>() >= 0 && shapes_out[0][r].equal(shape),
             "strategy ddp: all_gather needs the same shape (at most ", kMaxDims, " dimensions) on every rank; rank ",
             rank_, " has ", t.sizes(), ", rank ", r, " differs");
  }
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int64_t r = 0; r < world_size_; ++r) out[0].push_back(torch::empty_like(t));
  std::vector<torch::Tensor> in{t};
  process_group_->allgather(out, in)->wait();
  return torch::stack(out[0]).to(tensor.device());
}

torch::Tensor DDPStrategy::broadcast(const torch::Tensor& tensor, int64_t src) {
  if (!process_group_) return tensor;
  LT_CHECK(src >= 0 && src < world_size_, "strategy ddp: broadcast from rank ", src, " but the world size is ",
           world_size_);
  torch::Tensor t = tensor.detach().to(device_).clone().contiguous();
  c10d::BroadcastOptions opts;
  opts.rootRank = src;
  std::vector<torch::Tensor> tensors{t};
  auto scope = watch("broadcast (strategy broadcast)");
  process_group_->broadcast(tensors, opts)->wait();
  return t.to(tensor.device());
}

void DDPStrategy::barrier(const std::string& /*name*/) {
  if (!process_group_) return;
  auto scope = watch("barrier");
  process_group_->barrier()->wait();
}

bool DDPStrategy::reduce_boolean_decision(bool decision, bool all) {
  if (!process_group_) return decision;
  const int64_t sum = reduce(torch::tensor({decision ? 1 : 0}, torch::kLong), ReduceOp::kSum).item<int64_t>();
  return all ? sum == world_size_ : sum > 0;
}

}  // namespace lt
