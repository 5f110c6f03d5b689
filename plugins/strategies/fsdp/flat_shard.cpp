#include <lightning_cpp/plugins/strategies/fsdp/flat_shard.h>

#include <algorithm>
#include <mutex>
#include <utility>
#include <unordered_map>
#include <unordered_set>

#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/rank_zero.h>

namespace lt {

namespace {
constexpr int64_t kBroadcastBucketBytes = int64_t(250) * 1024 * 1024;

const char* op_name(int64_t op) { return op == 0 ? "all_gather" : "reduce_scatter"; }
}  // namespace

// Blocks of the units' sizes, kept for reuse: a FULL_SHARD step gathers and
// frees every unit's buffer, and reduces every unit through a buffer of the
// same size; from the C allocator those would stay in its heap (glibc's
// mmap threshold grows to the sizes it sees freed) and the process's
// resident set would grow by about a model's size. A block is handed out as
// a DataPtr whose deleter gives it back (the pool lives as long as a block).
class FlatShard::BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  ~BlockPool() {
    for (auto& [bytes, blocks] : free_) {
      for (void* block : blocks) c10::free_cpu(block);
    }
  }
  at::DataPtr take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    void* block = nullptr;
    auto& blocks = free_[bytes];
    if (blocks.empty()) {
      block = c10::alloc_cpu(bytes);
    } else {
      block = blocks.back();
      blocks.pop_back();
    }
    return at::DataPtr(block, new Taken{shared_from_this(), block, bytes}, &give_back, at::Device(at::kCPU));
  }
  // A CPU tensor of `numel` elements of `options`' dtype in a block.
  torch::Tensor tensor(int64_t numel, const torch::TensorOptions& options) {
    const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
    at::DataPtr data = take(bytes);
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(data), nullptr, /*resizable=*/false);
    return torch::empty({0}, options).set_(storage, 0, {numel}, {1});
  }

 private:
  struct Taken {
    std::shared_ptr<BlockPool> pool;
    void* block;
    size_t bytes;
  };
  static void give_back(void* ctx) {
    std::unique_ptr<Taken> taken(static_cast<Taken*>(ctx));
    std::lock_guard<std::mutex> lock(taken->pool->mutex_);
    taken->pool->free_[taken->bytes].push_back(taken->block);
  }
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
};

struct FlatShard::Unit {
  std::string name;                  // the module path heading it ("" for the root)
  FSDPUnitBase* declared = nullptr;  // an lt::FSDPUnit, or null (policy, root)
  bool freeable = false;
  std::vector<size_t> params;    // into params_, in the module's order
  std::vector<int64_t> offsets;  // where each starts in `full`
  int64_t chunk = 0;             // S_u
  int64_t shard_offset = 0;      // where the rank's chunk starts in shard_data_
  torch::Tensor full;            // W * S_u: the parameters are views of it
  bool materialized = true;      // full's storage holds the parameters
  bool gathered = true;          // as the sequence sees it (canonical window: recorded, not real)
  size_t ready = 0;              // parameters whose gradient accumulated in this backward
  bool done = false;             // reduced (or freed) in this backward
  bool gathered_outside = false;  // gathered for a forward outside a micro-batch (freed after it)
  torch::Tensor grads;            // W * S_u: where its parameters' gradients accumulate (declared units)
};

// Shadows one micro-batch of the ranks still training (see flat_shard.h).
class FlatShard::JoinHookImpl : public JoinHook {
 public:
  explicit JoinHookImpl(FlatShard& sync) : sync_(sync) {}

  void main_hook() override {
    const bool reduces = sync_.joined_iteration_reduces();
    sync_.GradientSync::shadow_forward();  // the collective layers' (their own group)
    sync_.divisor_ = 1.0;                  // the zeros it sends need none
    sync_.pos_ = 0;
    sync_.record_.clear();
    sync_.replay(reduces);
    if (!reduces) return;
    LT_CHECK(sync_.join_step() != nullptr,
             "strategy fsdp: a rank that ran out of data must step its shard with the others (lockstep Join); "
             "without a join step it would spread a stale shard");
    sync_.join_step()();  // its optimizer step issues the gathers the others issue
  }

  // The buffers from the last rank to join (the parameters are equal already).
  void post_hook(bool is_last_joiner) override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> buffers;
    for (const auto& b : sync_.module_->buffers(/*recurse=*/true)) {
      if (b.defined()) buffers.push_back(b.detach());
    }
    if (buffers.empty()) return;  // alike on every rank: the same module
    std::vector<torch::Tensor> rank{torch::full({1}, is_last_joiner ? int64_t(sync_.group_->getRank()) : int64_t(-1),
                                                torch::TensorOptions().dtype(torch::kLong).device(sync_.device_))};
    c10d::AllreduceOptions max;
    max.reduceOp = c10d::ReduceOp::MAX;
    sync_.group_->allreduce(rank, max)->wait();
    c10d::broadcast_coalesced(sync_.group_, buffers, kBroadcastBucketBytes, static_cast<int>(rank[0].item<int64_t>()));
  }

 private:
  FlatShard& sync_;
};

FlatShard::FlatShard(std::shared_ptr<torch::nn::Module> module, c10::intrusive_ptr<c10d::ProcessGroup> group,
                     FlatShardOptions options)
    : module_(std::move(module)),
      group_(std::move(group)),
      collectives_(options.shard_group ? options.shard_group : group_),
      replicate_group_(options.replicate_group),
      free_parameters_(options.free_parameters) {
  LT_CHECK(module_ != nullptr, "strategy fsdp: the module is null");
  backward_prefetch_ = options.backward_prefetch == BackwardPrefetch::kBackwardPre;
  if (options.reduce_dtype == ReduceDtype::kFloat16) reduce_dtype_ = torch::kHalf;
  if (options.reduce_dtype == ReduceDtype::kBFloat16) {
    LT_CHECK_VALUE(collectives_.native(), "strategy fsdp: reduce_dtype bfloat16 needs the nccl backend: Gloo ",
                   "(LibTorch 1.13) cannot reduce bfloat16 tensors; use float16");
    reduce_dtype_ = torch::kBFloat16;
  }
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : module_->parameters(/*recurse=*/true)) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) params_.push_back(p);
  }
  LT_CHECK(!params_.empty(), "strategy fsdp: the module has no trainable parameter");
  device_ = params_[0].device();
  torch::NoGradGuard no_grad;
  {
    // Every rank starts from rank 0's parameters and buffers, as DDP does:
    // here the frozen ones, the trainable ones unit by unit below (in place,
    // so that the module is never twice in memory).
    std::vector<torch::Tensor> states;
    for (const auto& p : module_->parameters(/*recurse=*/true)) {
      if (!p.requires_grad()) states.push_back(p.detach());
    }
    for (const auto& b : module_->buffers(/*recurse=*/true)) {
      if (b.defined()) states.push_back(b.detach());
    }
    if (!states.empty()) c10d::broadcast_coalesced(group_, states, kBroadcastBucketBytes, 0);
  }
  build_units(options);
  const int64_t world = collectives_.world_size(), rank = collectives_.rank();
  int64_t total = 0;
  for (Unit& unit : units_) {
    int64_t numel = 0;
    for (size_t i : unit.params) {
      unit.offsets.push_back(numel);
      numel += params_[i].numel();
    }
    unit.chunk = (numel + world - 1) / world;
    unit.shard_offset = total;
    total += unit.chunk;
  }
  shard_data_ = torch::zeros({total}, params_[0].options().requires_grad(false));
  if (device_.is_cpu()) pool_ = std::make_shared<BlockPool>();
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    const torch::Tensor& first = params_[unit.params[0]];
    unit.full = torch::zeros({world * unit.chunk}, first.options().requires_grad(false));
    for (size_t j = 0; j < unit.params.size(); ++j) {
      torch::Tensor& p = params_[unit.params[j]];
      LT_CHECK_VALUE(p.dtype() == first.dtype() && p.device() == first.device(), "strategy fsdp: the trainable ",
                     "parameters of a unit must share one dtype and device (they are flattened into one buffer); ",
                     "unit '", unit.name, "' has ", p.dtype(), " on ", p.device(), " and ", first.dtype(), " on ",
                     first.device());
      unit.full.narrow(0, unit.offsets[j], p.numel()).copy_(p.detach().reshape(-1));
    }
    std::vector<torch::Tensor> from_rank0{unit.full};
    group_->broadcast(from_rank0)->wait();
    for (size_t j = 0; j < unit.params.size(); ++j) {
      torch::Tensor& p = params_[unit.params[j]];
      p.set_data(unit.full.narrow(0, unit.offsets[j], p.numel()).view(p.sizes()));
    }
    shard_data_.narrow(0, unit.shard_offset, unit.chunk).copy_(unit.full.narrow(0, rank * unit.chunk, unit.chunk));
    // The optimizer's parameter for this unit: a leaf whose bytes are its part of shard_data_.
    shards_.push_back(shard_data_.narrow(0, unit.shard_offset, unit.chunk).detach().requires_grad_(true));
    for (size_t j = 0; j < unit.params.size(); ++j) {
      const size_t i = unit.params[j];
      auto accumulator = torch::autograd::impl::grad_accumulator(params_[i]);
      hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, u](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            Unit& unit = units_[u];
            if (in_micro_batch_ && ++unit.ready == unit.params.size()) on_ready(u);
            return outputs;
          })));
      accumulators_.push_back(std::move(accumulator));
    }
    if (unit.declared != nullptr) unit.declared->set_unit_hooks(this);
  }
}

void FlatShard::build_units(const FlatShardOptions& options) {
  std::unordered_map<const c10::TensorImpl*, size_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].unsafeGetTensorImpl()] = i;
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> owner(params_.size(), kNone);
  std::vector<Unit> units;
  // A submodule's parameters not yet in a unit become one (bottom-up: the innermost first).
  auto claim = [&](const std::string& name, torch::nn::Module& m, FSDPUnitBase* declared) {
    std::vector<size_t> mine;
    for (const auto& p : m.parameters(/*recurse=*/true)) {
      auto it = index.find(p.unsafeGetTensorImpl());
      if (it != index.end() && owner[it->second] == kNone) mine.push_back(it->second);
    }
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    int64_t numel = 0;
    for (size_t i : mine) numel += params_[i].numel();
    if (mine.empty() || (declared == nullptr && numel < options.min_num_params)) return;
    for (size_t i : mine) owner[i] = units.size();
    Unit unit;
    unit.name = name;
    unit.declared = declared;
    unit.params = std::move(mine);
    units.push_back(std::move(unit));
  };
  const auto named = module_->named_modules("", /*include_self=*/false);
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  for (const auto& item : named) modules.emplace_back(item.key(), item.value());
  // Post-order: a module after its descendants (named_modules is pre-order: reversed).
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    if (auto* declared = dynamic_cast<FSDPUnitBase*>(it->second.get())) claim(it->first, *it->second, declared);
  }
  if (options.min_num_params > 0) {
    for (auto it = modules.rbegin(); it != modules.rend(); ++it) claim(it->first, *it->second, nullptr);
  }
  std::vector<size_t> rest;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owner[i] == kNone) rest.push_back(i);
  }
  if (!rest.empty()) {
    Unit root;
    root.params = std::move(rest);
    units.push_back(std::move(root));
  }
  std::sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.params[0] < b.params[0]; });
  for (Unit& unit : units) unit.freeable = options.free_parameters;
  units_ = std::move(units);
}

FlatShard::~FlatShard() {
  for (auto* work : {&heartbeat_, &grad_sync_work_}) {
    if (!*work) continue;
    try {
      (*work)->wait();
    } catch (const std::exception&) {
      // Destroyed after a failed step: the error has been reported already.
    }
  }
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  bool emptied = false;
  for (Unit& unit : units_) {
    if (unit.declared != nullptr) unit.declared->set_unit_hooks(nullptr);
    if (unit.materialized) continue;
    // A run that failed with the parameters sharded: no collective can make
    // them whole here; empty tensors fail where they are used, not at random.
    for (size_t i : unit.params) params_[i].set_data(torch::empty({0}, params_[i].options()));
    emptied = true;
  }
  if (emptied) {
    rank_zero_warn("strategy fsdp: the run ended with the parameters sharded (FULL_SHARD), so the module's sharded ",
                   "parameters are now empty; load a checkpoint to use the module");
  }
}

std::vector<std::string> FlatShard::unit_names() const {
  std::vector<std::string> names;
  for (const Unit& unit : units_) names.push_back(unit.name);
  return names;
}

const std::vector<size_t>& FlatShard::unit_parameters(size_t u) const { return units_.at(u).params; }

bool FlatShard::unit_whole(size_t u) const { return units_.at(u).materialized; }

ShardCollectives::Gathering FlatShard::start_gather_unit(size_t u, const torch::Tensor& chunk, int64_t root) const {
  LT_INTERNAL_ASSERT(chunk.numel() == units_.at(u).chunk && chunk.is_contiguous(), "FlatShard::start_gather_unit: ",
                     "a chunk of ", chunk.numel(), " elements for unit '", units_[u].name, "' of ", units_[u].chunk);
  torch::NoGradGuard no_grad;
  return collectives_.start_gather(chunk.detach().reshape(-1), root);
}

torch::Tensor FlatShard::unit_parameter(size_t u, size_t j, const torch::Tensor& flat) const {
  const Unit& unit = units_.at(u);
  const torch::Tensor& p = params_[unit.params.at(j)];
  return flat.narrow(0, unit.offsets[j], p.numel()).view(p.sizes());
}

int64_t FlatShard::unit_parameter_offset(size_t u, size_t j) const { return units_.at(u).offsets.at(j); }

torch::Tensor FlatShard::flatten(const std::vector<torch::Tensor>& whole) const {
  LT_INTERNAL_ASSERT(whole.size() == params_.size(), "FlatShard::flatten: ", whole.size(), " tensors for ",
                     params_.size(), " parameters");
  torch::NoGradGuard no_grad;
  const int64_t rank = collectives_.rank();
  torch::Tensor out = torch::zeros({shard_data_.numel()}, whole[0].options());
  for (const Unit& unit : units_) {
    // The parameters' elements in this rank's chunk [lo, hi) of the unit's flat buffer (a sharded
    // checkpoint's placeholder reads just those from its rank files).
    const int64_t lo = rank * unit.chunk, hi = lo + unit.chunk;
    for (size_t j = 0; j < unit.params.size(); ++j) {
      const torch::Tensor& t = whole[unit.params[j]];
      const int64_t from = std::max(lo, unit.offsets[j]), to = std::min(hi, unit.offsets[j] + t.numel());
      if (from < to) copy_elements(t, from - unit.offsets[j], out.narrow(0, unit.shard_offset + from - lo, to - from));
    }
  }
  return out;
}

// -- storage of a unit's full buffer ------------------------------------------------------------

void FlatShard::materialize(Unit& unit) {
  if (unit.materialized) return;
  c10::StorageImpl* storage = unit.full.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(unit.full.numel()) * unit.full.element_size();
  storage->set_data_ptr_noswap(pool_ ? pool_->take(bytes) : storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
  unit.materialized = true;
}

void FlatShard::gather(size_t u) {
  Unit& unit = units_[u];
  torch::NoGradGuard no_grad;
  materialize(unit);
  collectives_.all_gather(shard_data_.narrow(0, unit.shard_offset, unit.chunk), unit.full);
}

void FlatShard::free(size_t u) {
  Unit& unit = units_[u];
  if (!unit.freeable || !unit.materialized) return;
  if (prefetch_ && unit_of(sequence_[prefetch_pos_ - 1]) == u) return;  // its gather under way: needed next
  c10::StorageImpl* storage = unit.full.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, storage->device()));
  storage->set_nbytes(0);
  unit.materialized = false;
}

torch::Tensor FlatShard::unit_buffer(const Unit& unit) const {
  const int64_t numel = collectives_.world_size() * unit.chunk;
  return pool_ ? pool_->tensor(numel, unit.full.options()) : torch::empty({numel}, unit.full.options());
}

void FlatShard::accumulate_in_place(size_t u) {
  Unit& unit = units_[u];
  if (unit.grads.defined() || !torch::GradMode::is_enabled()) return;
  torch::NoGradGuard no_grad;
  unit.grads = unit_buffer(unit).zero_();
  for (size_t j = 0; j < unit.params.size(); ++j) {
    torch::Tensor& p = params_[unit.params[j]];
    torch::Tensor view = unit.grads.narrow(0, unit.offsets[j], p.numel()).view(p.sizes());
    if (p.grad().defined()) view.copy_(p.grad());
    p.mutable_grad() = view;
  }
}

void FlatShard::reduce(size_t u) {
  Unit& unit = units_[u];
  torch::NoGradGuard no_grad;
  // The unit's gradients, flat: accumulated there in place (a declared unit), or gathered into a buffer.
  torch::Tensor flat = std::move(unit.grads);
  unit.grads = torch::Tensor();
  if (!flat.defined()) {
    flat = unit_buffer(unit).zero_();
    for (size_t j = 0; j < unit.params.size(); ++j) {
      const torch::Tensor& p = params_[unit.params[j]];
      if (p.grad().defined()) flat.narrow(0, unit.offsets[j], p.numel()).copy_(p.grad().reshape(-1));
    }
  }
  for (size_t i : unit.params) params_[i].mutable_grad() = torch::Tensor();
  torch::Tensor& grad = shards_[u].mutable_grad();
  if (!grad.defined()) grad = torch::zeros_like(shards_[u]);
  // In reduce_dtype as c10d's FP16_COMPRESS hook: cast, then divide (no overflow), reduce, cast back.
  if (reduce_dtype_) flat = flat.to(*reduce_dtype_);  // the float32 buffer back to the pool
  if (divisor_ != 1.0) flat.div_(divisor_);
  torch::Tensor chunk = reduce_dtype_ ? torch::empty({unit.chunk}, flat.options()) : grad;
  collectives_.reduce_scatter(flat, chunk);
  if (replicate_group_) {
    // HYBRID_SHARD: the sum of the nodes' reduced chunks (the replicas hold the same chunk of every rank's sum).
    std::vector<torch::Tensor> across{chunk};
    replicate_group_->allreduce(across)->wait();
  }
  if (reduce_dtype_) grad.copy_(chunk);
}

void FlatShard::unshard() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u].materialized) gather(u);
  }
}

bool FlatShard::whole() const {
  return std::all_of(units_.begin(), units_.end(), [](const Unit& unit) { return unit.materialized; });
}

void FlatShard::reshard() {
  if (canonical()) return;  // every unit stays whole until the sequence is known
  for (size_t u = 0; u < units_.size(); ++u) free(u);
}

void FlatShard::reload_shard() {
  torch::NoGradGuard no_grad;
  const int64_t rank = collectives_.rank();
  for (const Unit& unit : units_) {
    LT_INTERNAL_ASSERT(unit.materialized, "FlatShard::reload_shard with unit '", unit.name, "' sharded");
    shard_data_.narrow(0, unit.shard_offset, unit.chunk).copy_(unit.full.narrow(0, rank * unit.chunk, unit.chunk));
  }
}

// -- the sequence --------------------------------------------------------------------------------

int64_t FlatShard::code(Op op, size_t u) const {
  return static_cast<int64_t>(op) * static_cast<int64_t>(units_.size()) + static_cast<int64_t>(u);
}
FlatShard::Op FlatShard::op_of(int64_t code) const {
  return static_cast<Op>(code / static_cast<int64_t>(units_.size()));
}
size_t FlatShard::unit_of(int64_t code) const {
  return static_cast<size_t>(code % static_cast<int64_t>(units_.size()));
}

size_t FlatShard::index_of(const FSDPUnitBase& declared) const {
  const auto it = std::find_if(units_.begin(), units_.end(), [&](const Unit& u) { return u.declared == &declared; });
  LT_INTERNAL_ASSERT(it != units_.end(), "FlatShard: an lt::FSDPUnit it does not know");
  return static_cast<size_t>(it - units_.begin());
}

void FlatShard::event(Op op, size_t u) {
  Unit& unit = units_[u];
  if (op == kGather) unit.gathered = true;
  if (canonical()) {
    record_.push_back(code(op, u));
    return;
  }
  // The sequence under no_sync has no reduce_scatter.
  while (pos_ < sequence_.size() && !sync_ && op_of(sequence_[pos_]) == kReduce) ++pos_;
  if (pos_ >= sequence_.size() || sequence_[pos_] != code(op, u)) {
    const std::string expected =
        pos_ < sequence_.size()
            ? c10::str(op_name(op_of(sequence_[pos_])), " of unit '", units_[unit_of(sequence_[pos_])].name, "'")
            : std::string("nothing more");
    throw Error(c10::str("strategy fsdp: this micro-batch's collective ", pos_ + 1, " is the ", op_name(op),
                         " of unit '", unit.name, "' where every earlier micro-batch had the ", expected,
                         ": a rank with no data shadows the units' collectives in the order the first micro-batch ",
                         "ran them, so every micro-batch must run the same units in the same order (an lt::FSDPUnit ",
                         "called in a branch, or a parameter that gets a gradient only sometimes, changes it)"));
  }
  ++pos_;
  issue(op, u);
}

void FlatShard::issue(Op op, size_t u) {
  if (op == kGather) {
    sequence_gather(u);
    return;
  }
  free(u);  // first: the parameters' bytes are not needed for the reduction
  reduce(u);
}

void FlatShard::replay(bool reduces) {
  sync_ = reduces;
  if (canonical()) {
    if (!reduces) return;
    for (size_t u = units_.size(); u-- > 0;) reduce(u);
    share_sequence(/*has_record=*/false);
    return;
  }
  while (pos_ < sequence_.size()) {
    const int64_t c = sequence_[pos_++];
    if (op_of(c) == kGather) {
      sequence_gather(unit_of(c));
    } else if (reduces) {
      reduce(unit_of(c));
    }
  }
  LT_INTERNAL_ASSERT(!prefetch_, "FlatShard: a prefetched gather not waited for");
  for (size_t u = 0; u < units_.size(); ++u) free(u);
}

void FlatShard::sequence_gather(size_t u) {
  if (prefetch_ && prefetch_pos_ == pos_) {
    std::exchange(prefetch_, {})->wait();  // unit u's, started by the G before
  } else {
    gather(u);
  }
  if (!backward_prefetch_ || pos_ <= backward_start_) return;
  size_t next = pos_;
  while (next < sequence_.size() && op_of(sequence_[next]) != kGather) ++next;
  if (next == sequence_.size() || unit_of(sequence_[next]) == u) return;
  Unit& unit = units_[unit_of(sequence_[next])];
  materialize(unit);
  prefetch_ = collectives_.start_all_gather(shard_data_.narrow(0, unit.shard_offset, unit.chunk), unit.full);
  prefetch_pos_ = next + 1;
}

void FlatShard::share_sequence(bool has_record) {
  // Long enough for every unit's gathers in forward and backward and its reduction, twice over.
  const int64_t length = 8 * static_cast<int64_t>(units_.size()) + 8;
  LT_CHECK(!has_record || static_cast<int64_t>(record_.size()) <= length, "strategy fsdp: a micro-batch ran ",
           record_.size(), " collectives over ", units_.size(), " units (more than ", length,
           "): is an lt::FSDPUnit called many times in one forward?");
  // [its length, where backward starts in it, the record], -1 where a rank has none.
  torch::Tensor t = torch::full({length + 2}, int64_t(-1), torch::kLong);
  if (has_record) {
    t[0] = static_cast<int64_t>(record_.size());
    t[1] = static_cast<int64_t>(backward_start_);
    if (!record_.empty()) t.narrow(0, 2, static_cast<int64_t>(record_.size())).copy_(torch::tensor(record_));
  }
  std::vector<torch::Tensor> v{t.to(device_)};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  group_->allreduce(v, max)->wait();
  const torch::Tensor got = v[0].cpu();
  const int64_t size = got[0].item<int64_t>();
  for (size_t u = 0; u < units_.size(); ++u) free(u);
  // Every rank padded this micro-batch (a window that ends past every rank's
  // data, as the rest of an epoch resumed mid-window can): each reduced in the
  // canonical order, and the window stays canonical (after_optimizer_step
  // gathers the units back).
  if (size < 0) return;
  const auto* data = got.data_ptr<int64_t>();
  backward_start_ = static_cast<size_t>(data[1]);
  sequence_.assign(data + 2, data + 2 + size);
}

// -- one micro-batch --------------------------------------------------------------------------------

void FlatShard::before_forward() {
  heartbeat_ = Join::notify_join_context(*this);
  if (join_config().enable && !join_config().scheduled) {
    grad_sync_work_ = grad_sync_flag(/*joined=*/false, nullptr);
    grad_sync_work_->wait();
    grad_sync_work_.reset();
  }
  in_micro_batch_ = true;
  shadowing_ = false;
  sync_ = require_backward_grad_sync();
  pos_ = 0;
  record_.clear();
  canonical_next_ = 0;
  for (Unit& unit : units_) {
    unit.gathered = !unit.freeable;
    unit.ready = 0;
    unit.done = false;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].freeable && units_[u].declared == nullptr) event(kGather, u);
  }
}

void FlatShard::shadow_forward() {
  GradientSync::shadow_forward();
  shadowing_ = true;
}

void FlatShard::enter(FSDPUnitBase& declared) {
  const size_t u = index_of(declared);
  Unit& unit = units_[u];
  if (in_micro_batch_) {
    if (unit.freeable && !unit.gathered) event(kGather, u);
    return;
  }
  // Outside a training micro-batch (an evaluation, and the time between
  // epochs, have every unit whole): a sharded unit is gathered for this
  // forward only, so every rank must run it.
  if (!unit.materialized) {
    gather(u);
    unit.gathered_outside = true;
  }
}

void FlatShard::leave(FSDPUnitBase& declared, const std::vector<torch::Tensor>& outputs) {
  const size_t u = index_of(declared);
  Unit& unit = units_[u];
  if (!unit.freeable) return;
  if (!in_micro_batch_) {
    if (std::exchange(unit.gathered_outside, false)) free(u);
    return;
  }
  if (torch::GradMode::is_enabled()) {
    // An output of another type cannot be found again in backward: the unit
    // stays gathered until its gradients are reduced.
    if (outputs.empty()) return;
    for (const auto& output : outputs) {
      if (!output.defined() || !output.requires_grad()) continue;
      output.register_hook([this, u](const torch::Tensor& grad) {
        pre_backward(u);
        return grad;
      });
    }
  }
  unit.gathered = false;
  if (!canonical()) free(u);
}

void FlatShard::pre_backward(size_t u) {
  Unit& unit = units_[u];
  if (!in_micro_batch_ || unit.done) return;
  if (!unit.gathered) event(kGather, u);
  accumulate_in_place(u);
}

void FlatShard::on_ready(size_t u) {
  Unit& unit = units_[u];
  if (unit.done) return;
  unit.done = true;
  if (sync_) {
    if (canonical()) {
      record_.push_back(static_cast<int64_t>(kReduce) * static_cast<int64_t>(units_.size()) +
                        static_cast<int64_t>(u));
      // Canonical: reduce from the last unit down, each once those after it are done.
      while (canonical_next_ < units_.size() && units_[units_.size() - 1 - canonical_next_].done) {
        const size_t next = units_.size() - 1 - canonical_next_++;
        free(next);  // the canonical window ends with this backward: nothing gathers it before
        reduce(next);
      }
    } else {
      event(kReduce, u);
    }
  } else if (!canonical()) {
    free(u);
  }
  unit.gathered = !unit.freeable;
}

void FlatShard::end_backward() {
  // Units some of whose parameters got no gradient, from the last.
  for (size_t u = units_.size(); u-- > 0;) on_ready(u);
  if (!canonical()) {
    LT_INTERNAL_ASSERT(!prefetch_, "FlatShard: a prefetched gather not waited for");
    // Under no_sync the sequence without its reduce_scatters.
    const auto counted = [&](int64_t c) { return sync_ || op_of(c) == kGather; };
    const auto expected = std::count_if(sequence_.begin(), sequence_.end(), counted);
    const auto issued = std::count_if(sequence_.begin(), sequence_.begin() + static_cast<std::ptrdiff_t>(pos_), counted);
    LT_CHECK(issued == expected, "strategy fsdp: this micro-batch ran ", issued, " of its units' ", expected,
             " collectives: every micro-batch must run the same units in the same order");
  } else if (sync_) {
    share_sequence(/*has_record=*/true);
  }
  in_micro_batch_ = false;
}

void FlatShard::backward(const torch::Tensor& loss) {
  divisor_ = static_cast<double>(group_->getSize());
  if (heartbeat_) {
    heartbeat_->wait();
    // The heartbeat's sum: the ranks with a micro-batch in this iteration.
    if (!divide_by_initial_world_size()) divisor_ = heartbeat_->result().at(0).item<double>();
    heartbeat_.reset();
  }
  sync_ = torch::GradMode::is_enabled() && require_backward_grad_sync();
  if (std::exchange(shadowing_, false)) {
    // A padding micro-batch: the rest of the others' collectives, with the
    // gradients this rank's window accumulated so far.
    replay(sync_);
    in_micro_batch_ = false;
    return;
  }
  if (canonical()) backward_start_ = record_.size();
  loss.backward();
  end_backward();
}

void FlatShard::after_optimizer_step() {
  // In the canonical window every unit is whole when a micro-batch starts.
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u].freeable || canonical()) gather(u);
  }
}

std::unique_ptr<JoinHook> FlatShard::join_hook() { return std::make_unique<JoinHookImpl>(*this); }

}  // namespace lt
