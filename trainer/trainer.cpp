#include <lightning_cpp/trainer/trainer.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <lightning_cpp/core/blas.h>
#include <lightning_cpp/core/cpu.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/env.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/epoch_samples.h>
#include <lightning_cpp/data/sampler.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/logger_collection.h>
#include <lightning_cpp/loggers/tensorboard.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/environments/torchrun.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/precision/precision.h>
#include <lightning_cpp/plugins/strategies/registration.h>

namespace lt {

namespace fs = std::filesystem;

struct Trainer::Run {
  Run(Trainer& trainer, LightningModule& module, std::vector<std::shared_ptr<Callback>> callbacks, Logger* logger)
      : hooks(trainer, module, std::move(callbacks), trainer.state_),
        ctx{trainer.options_, trainer.state_, *trainer.strategy_, module, hooks, logger, trainer.results_,
            &trainer.optim_, trainer.options_.profiler().get()} {
    hooks.set_profiler(ctx.profiler);
  }
  CallbackHooks hooks;
  LoopContext ctx;
  Stage stage = Stage::kNone;
};

Trainer::Trainer(TrainerOptions options)
    : options_(std::move(options)),
      fit_loop_(std::make_shared<FitLoop>()),
      evaluation_loop_(std::make_shared<EvaluationLoop>()),
      prediction_loop_(std::make_shared<PredictionLoop>()) {
  options_.validate();
  warn_if_slow_blas();
  warn_if_no_avx2();
  if (options_.deterministic()) {
    // As Lightning's Trainer(deterministic=True), with or without a seed:
    // an operation without a deterministic implementation raises.
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);  // what deterministic cuBLAS needs
  }
  apply_debug_modes();
  add_default_callbacks();
  if (!options_.logger() && options_.default_logger()) {
    // The CLI's default too (cli/resolve_config.cpp): metrics.csv and TensorBoard's events in one version folder.
    options_.logger(std::make_shared<LoggerCollection>(std::vector<std::shared_ptr<Logger>>{
        std::make_shared<CSVLogger>(CSVLoggerOptions(options_.default_root_dir())),
        std::make_shared<TensorBoardLogger>(TensorBoardLoggerOptions(options_.default_root_dir()))}));
  }
  strategy_ = options_.strategy() ? options_.strategy() : make_strategy(options_);
  if (const auto& plugin = options_.precision_plugin()) {
    LT_CHECK_VALUE(options_.precision() == "32-true" || options_.precision() == plugin->name(),
                   "trainer.precision '", options_.precision(), "' and a precision plugin (", plugin->name(),
                   ") were both given; give one");
    strategy_->set_precision(plugin);
  } else {
    strategy_->set_precision(make_precision(options_.precision(), options_.device_type()));
  }
  // Lightning's default (Strategy.checkpoint_io); a strategy given another keeps it.
  if (!strategy_->has_checkpoint_io()) strategy_->set_checkpoint_io(std::make_shared<TorchCheckpointIO>());
}

Trainer::~Trainer() = default;

void Trainer::apply_debug_modes() {
  if (const int64_t n = options_.fast_dev_run(); n > 0) {
    // As Lightning: the limits, one epoch of n steps, nothing written.
    options_.limit_train_batches(n).limit_val_batches(n).limit_test_batches(n).limit_predict_batches(n);
    options_.max_epochs(1).max_steps(n).num_sanity_val_steps(0).val_check_interval(1.0).check_val_every_n_epoch(1);
    options_.logger(nullptr).default_logger(false);
    rank_zero_info("Running in `fast_dev_run` mode: will run the requested loop using ", n,
                   " batch(es). Logging and checkpointing is suppressed.");
  }
  if (overfits()) options_.limit_train_batches(options_.overfit_batches()).limit_val_batches(options_.overfit_batches());
}

void Trainer::add_default_callbacks() {
  // Lightning's defaults, made by name (callbacks sit above the Trainer,
  // which knows them only as lt::Callback): a progress bar and a model
  // summary unless given; first, the user's after them in their order.
  const auto& given = options_.callbacks();
  const auto missing = [&](const std::string& name) {
    return std::none_of(given.begin(), given.end(), [&](const auto& c) { return c->name() == name; });
  };
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (options_.enable_progress_bar() && missing("ProgressBar")) {
    callbacks.push_back(Registry::global().create<Callback>("ProgressBar"));
  }
  if (options_.enable_model_summary() && missing("ModelSummary")) {
    callbacks.push_back(Registry::global().create<Callback>("ModelSummary"));
  }
  callbacks.insert(callbacks.end(), given.begin(), given.end());
  options_.callbacks(std::move(callbacks));
}

void Trainer::set_accumulate_grad_batches(int64_t k) {
  LT_CHECK_VALUE(k >= 1, "trainer.accumulate_grad_batches must be >= 1, got ", k);
  options_.accumulate_grad_batches(k);
}

Strategy& Trainer::strategy() { return *strategy_; }

bool Trainer::is_global_zero() { return strategy_->is_global_zero(); }

std::string Trainer::interrupted_checkpoint_path() const {
  return fs::absolute(fs::path(log_dir()) / "interrupted.ckpt").lexically_normal().string();
}

std::string Trainer::log_dir() const {
  if (agreed_log_dir_) return *agreed_log_dir_;
  if (options_.logger() && !options_.logger()->log_dir().empty()) return options_.logger()->log_dir();
  return options_.default_root_dir();
}

namespace {
bool names_a_checkpoint(const std::string& ckpt_path) { return ckpt_path == "last" || ckpt_path == "best"; }

// The Trainer method a stage is run by, as Lightning's messages name it.
const char* trainer_fn(Stage stage) {
  switch (stage) {
    case Stage::kTrain: return "fit";
    case Stage::kValidate: return "validate";
    case Stage::kTest: return "test";
    case Stage::kPredict: return "predict";
    default: return stage_name(stage);
  }
}

// The module's hparams with the DataModule's, as Lightning logs them: a key
// both have must have one value.
HParams merged_hparams(HParams module, const HParams& data) {
  std::string clashes;
  for (const auto& [key, value] : data) {
    auto [it, inserted] = module.emplace(key, value);
    if (!inserted && it->second != value) {
      clashes += c10::str(clashes.empty() ? "" : ", ", key, " (module ", it->second, ", data module ", value, ")");
    }
  }
  LT_CHECK_VALUE(clashes.empty(), "the LightningModule's and the DataModule's hparams have the same key(s) with ",
                 "different values: ", clashes, "; rename one, or give both the same value");
  return module;
}
}  // namespace

std::string Trainer::resolve_ckpt_path(const std::string& ckpt_path, Run& run, bool restarted) {
  const std::string which = restarted ? "last" : ckpt_path;
  if (!names_a_checkpoint(which)) return ckpt_path;
  std::vector<std::string> candidates;
  for (const auto& cb : run.hooks.callbacks()) candidates.push_back(cb->checkpoint_path(which));
  // `last` is the run's newest checkpoint: a stop on request's too, which a
  // run writes after any other (so it wins a tie of the file times' ticks).
  const std::string interrupted = which == "last" ? interrupted_checkpoint_path() : std::string();
  candidates.push_back(interrupted);
  std::string path;
  fs::file_time_type newest;
  for (const std::string& candidate : candidates) {
    std::error_code ec;
    if (candidate.empty() || !fs::exists(candidate, ec)) continue;
    const auto time = fs::last_write_time(candidate, ec);
    if (path.empty() || (which == "last" && (time > newest || (time == newest && candidate == interrupted)))) {
      path = candidate;
      newest = time;
    }
  }
  // Every rank resumes from the file rank 0 found.
  if (strategy_->world_size() > 1) path = strategy_->all_gather_bytes(path).at(0);
  if (path.empty() && !restarted) {
    std::vector<std::string> dirs;
    for (const auto& cb : run.hooks.callbacks()) {
      if (!cb->checkpoint_dir().empty()) dirs.push_back("'" + cb->checkpoint_dir() + "'");
    }
    const std::string what = c10::str("Trainer.", trainer_fn(run.stage), ": ckpt_path: ", which, ": no ", which,
                                      " checkpoint was found");
    LT_CHECK_VALUE(!dirs.empty(), what, ": no ModelCheckpoint callback is configured (", which,
                   " names one of its checkpoints); add one, or give a checkpoint's path");
    throw ValueError(c10::str(what, " in ", c10::Join(", ", dirs), " (the ModelCheckpoint's dirpath: ",
                              which == "last" ? "no .ckpt file there"
                                              : "this Trainer saved no best model, and no .ckpt file there names one",
                              "); fit with it first, or give a checkpoint's path"));
  }
  if (path.empty()) {
    rank_zero_info(program_name(), ": restarted by torchrun (TORCHELASTIC_RESTART_COUNT=",
                   env::get_int("TORCHELASTIC_RESTART_COUNT").value_or(0), ", or the group's members changed) with no ",
                   "checkpoint yet: starting anew");
    return {};
  }
  rank_zero_info(program_name(), ": ", run.stage == Stage::kTrain ? "resuming from " : "weights from ", path,
                 " (ckpt_path: ", which,
                 restarted ? ", after a restart by torchrun)" : ")");
  return path;
}

bool Trainer::overfits() const {
  const FractionOrCount& overfit = options_.overfit_batches();
  return overfit.is_count() ? overfit.count() > 0 : overfit.fraction() > 0.0;
}

std::shared_ptr<DataLoader> Trainer::prepare_loader(std::shared_ptr<DataLoader> loader, Stage stage) {
  if (!loader) return loader;
  // The rest of an epoch an earlier run dealt out after a resume (data/epoch_samples.h): its own sampler back.
  if (const auto* rest = dynamic_cast<const RemainderSampler*>(loader->sampler().get())) {
    loader->set_sampler(rest->inner());
  }
  if (const auto* rest = dynamic_cast<const RemainderBatchSampler*>(loader->batch_sampler().get())) {
    loader->set_batch_sampler(std::const_pointer_cast<LengthBucketBatchSampler>(rest->inner()));
  }
  const bool shuffles = dynamic_cast<const RandomSampler*>(loader->sampler().get()) != nullptr;
  if (overfits() && (stage == Stage::kTrain || stage == Stage::kValidate) && shuffles) {
    const char* which = stage == Stage::kTrain ? "training" : "validation";
    rank_zero_warn("You requested to overfit but enabled ", which, " dataloader shuffling. We are turning off the ",
                   which, " dataloader shuffling for you.");
    loader->set_sampler(std::make_shared<SequentialSampler>(loader->dataset()->size()));
  }
  strategy_->process_dataloader(*loader, stage, options_);
  return loader;
}

std::unique_ptr<Trainer::Run> Trainer::begin(const std::shared_ptr<LightningModule>& module, Stage stage,
                                             const std::string& ckpt_path) {
  // Resumed or evaluated from the earlier run's last or best checkpoint: its
  // logger folder is where they are (and where this run goes on logging).
  if (options_.logger() && names_a_checkpoint(ckpt_path)) {
    options_.logger()->continue_previous();
  } else if (options_.logger() && !ckpt_path.empty()) {
    // A checkpoint in one of the logger's version folders (the path a stop on
    // request printed): the run goes on logging there, one history.
    options_.logger()->continue_version_of(ckpt_path);
  }
  if (!agreed_log_dir_ && strategy_->world_size() > 1) {
    // Each rank would pick the logger's next free version itself, and a rank
    // that looks after rank 0 created its folder picks another: rank 0 decides.
    agreed_log_dir_ = strategy_->all_gather_bytes(log_dir()).at(0);
  }
  if (options_.seed()) seed_everything(*options_.seed());
  module_ = module.get();

  auto callbacks = options_.callbacks();
  std::stable_sort(callbacks.begin(), callbacks.end(),
                   [](const auto& a, const auto& b) { return a->priority() < b->priority(); });
  Logger* logger = strategy_->is_global_zero() ? options_.logger().get() : nullptr;
  auto run = std::make_unique<Run>(*this, *module, std::move(callbacks), logger);
  run->stage = stage;

  for (Stage s : {Stage::kTrain, Stage::kValidate, Stage::kTest}) {
    results_[s].bind(&state_.callback_metrics, &state_.progress_bar_metrics);
    results_[s].set_sync([this](const torch::Tensor& t, ReduceOp op) { return strategy_->reduce(t, op); });
    // Evaluation shards are not padded, so the ranks' batch counts may
    // differ: sync_dist epoch values are merged exactly at the epoch's end.
    ResultCollection::GatherFn gather;
    if (s != Stage::kTrain && strategy_->world_size() > 1) {
      gather = [this](const std::string& bytes) { return strategy_->all_gather_bytes(bytes); };
    }
    results_[s].set_epoch_gather(std::move(gather));
  }
  detail::ModuleAccess::attach(*module, {&state_, strategy_.get(), &results_[Stage::kTrain], &optim_});
  strategy_->precision().convert_module(*module);
  strategy_->setup(*module);
  if (run->ctx.profiler != nullptr) run->ctx.profiler->setup(stage, strategy_->global_rank(), log_dir());
  run->hooks.call(&Callback::setup, stage);
  return run;
}

void Trainer::end(Run& run) {
  run.hooks.call(&Callback::teardown, run.stage);
  if (run.ctx.profiler != nullptr) run.ctx.profiler->teardown(run.stage);
  if (run.ctx.logger != nullptr) {
    run.ctx.logger->save();
    run.ctx.logger->finalize("success");
  }
  strategy_->teardown();
  detail::ModuleAccess::detach(*module_);
  module_ = nullptr;
  state_.stage = Stage::kNone;
}

void Trainer::place(DataModule& data) const {
  data.set_ranks(strategy_->global_rank(), strategy_->local_rank(), strategy_->world_size());
}

void Trainer::run_stage(const std::shared_ptr<LightningModule>& module, Stage stage, const std::string& ckpt_path,
                        const std::function<RunData()>& data, const std::function<void(Run&, RunData&)>& body) {
  LT_CHECK(module != nullptr, "Trainer: the module is null");
  // Lightning's "No `validation_step()` method defined to run `Trainer.validate`", before anything runs.
  if (stage == Stage::kValidate || stage == Stage::kTest) {
    const bool test = stage == Stage::kTest;
    LT_CHECK_VALUE(test ? module->has_test_step() : module->has_validation_step(), "Trainer::", stage_name(stage),
                   ": the module has no ", test ? "test_step" : "validation_step", "; override it to ",
                   stage_name(stage));
  }
  strategy_->setup_environment(options_);
  strategy_->on_run_start(state_);  // from here a failure on one rank is reported on every rank
  std::unique_ptr<Run> run;
  try {
    RunData run_data = data();
    run = begin(module, stage, ckpt_path);
    body(*run, run_data);
  } catch (const std::exception& caught) {
    fail(run.get(), caught);
  }
  end(*run);
}

void Trainer::fit(const std::shared_ptr<LightningModule>& module, const std::shared_ptr<DataModule>& data,
                  const std::string& ckpt_path) {
  LT_CHECK(data != nullptr, "Trainer::fit: the data module is null");
  fit_stage(module, [this, data] {
    place(*data);
    // Data preparation once per node, which the other ranks wait for.
    if (strategy_->local_rank() == 0) data->prepare_data();
    strategy_->barrier("prepare_data");
    data->setup(Stage::kTrain);
    return RunData{data->train_dataloader(), data->val_dataloader(), data->hparams()};
  }, ckpt_path);
}

void Trainer::fit(const std::shared_ptr<LightningModule>& module, std::shared_ptr<DataLoader> train,
                  std::shared_ptr<DataLoader> val, const std::string& ckpt_path) {
  fit_stage(module, [&] { return RunData{train, val, {}}; }, ckpt_path);
}

void Trainer::fit(const std::shared_ptr<LightningModule>& module, std::shared_ptr<DataLoader> train,
                  const FitOptions& options) {
  fit(module, std::move(train), options.val(), options.ckpt_path());
}

void Trainer::fit_stage(const std::shared_ptr<LightningModule>& module, const std::function<RunData()>& data,
                        const std::string& ckpt_path) {
  LT_CHECK(module != nullptr, "Trainer: the module is null");
  // From the run's start: a SIGTERM while a peer's failure holds this rank in a
  // pre-run collective waits for that collective's error and the report of
  // every rank's part, as during training (a supervisor terminates the others
  // when one worker fails). Outlives the failure path (an interrupted checkpoint).
  // After the environment: a local spawn's supervisor forwards signals itself.
  strategy_->setup_environment(options_);
  std::optional<SignalGuard> signals;
  if (options_.handle_signals()) signals.emplace();
  // Workers torchrun restarted (after a failure, --max_restarts, or when the
  // group's members changed) resume from the newest checkpoint: every rank
  // where any was restarted (a node that joined starts its workers anew).
  const bool restarted = ckpt_path.empty() && TorchrunEnvironment::by_torchrun() &&
                         strategy_->reduce_boolean_decision(torchrun_restarted(), /*all=*/false);
  struct ForgetLoader {
    std::shared_ptr<DataLoader>& loader;
    ~ForgetLoader() { loader = nullptr; }
  } forget{fit_loader_};  // after fail(), whose interrupted.ckpt records the epoch's samples
  run_stage(module, Stage::kTrain, restarted ? "last" : ckpt_path, data, [&](Run& run, RunData& run_data) {
    std::shared_ptr<DataLoader>& train = run_data.loader;
    std::shared_ptr<DataLoader>& val = run_data.val;
    LT_CHECK(train != nullptr, "Trainer::fit: no training data (train_dataloader() returned null)");
    // On every rank, before anything runs: a clash is everyone's error, not only the logging rank's.
    const HParams hparams = merged_hparams(module->hparams(), run_data.hparams);
    fit_datamodule_hparams_ = run_data.hparams;
    LoopContext& ctx = run.ctx;
    prepare_loader(train, Stage::kTrain);
    prepare_loader(val, Stage::kValidate);
    optim_ = strategy_->setup_optimizers(*module);
    if (const auto& spec = options_.lr_scheduler()) {
      // The config's scheduler replaces the module's, as LightningCLI's configure_optimizers does.
      if (optim_.lr_scheduler != nullptr) {
        rank_zero_warn("the lr_scheduler of the config replaces the one configure_optimizers returned");
      }
      optim_.lr_scheduler = spec->make(*optim_.optimizer);
      optim_.interval = spec->interval;
      optim_.frequency = spec->frequency;
      optim_.monitor = spec->monitor;
      optim_.strict = spec->strict;
    }

    FeatureSet features;
    features.options = &options_;
    features.module = module.get();
    for (const auto& cb : run.hooks.callbacks()) features.callbacks.push_back(cb.get());
    features.has_validation = val != nullptr && module->has_validation_step();
    if (val != nullptr && !features.has_validation) {
      rank_zero_warn("fit was given validation data but the module has no validation_step: the validation loop "
                     "is skipped (override validation_step to validate)");
    }
    features.scheduler_per_step = optim_.lr_scheduler != nullptr && optim_.interval == Interval::kStep;
    features.train_batches =
        train->size() == DataLoader::kUnknownSize ? -1 : options_.limit_train_batches().apply(train->size());
    strategy_->check_features(features);

    run.hooks.call(&Callback::on_fit_start);
    module->on_fit_start();
    fit_loader_ = train;
    const std::string resume_from = resolve_ckpt_path(ckpt_path, run, restarted);
    if (!resume_from.empty()) {
      const StateDict restored = restore_checkpoint(resume_from);
      resume_epoch_samples(*train, restored, resume_from, state_, *strategy_, options_.accumulate_grad_batches());
    }
    if (ctx.logger != nullptr) ctx.logger->log_hyperparams(hparams);
    fit_loop_->run(ctx, *train, val.get());
    run.hooks.call(&Callback::on_fit_end);
    module->on_fit_end();
    strategy_->on_train_end();
  });
}

void Trainer::fail(Run* run, const std::exception& caught) {
  // The strategy may replace a collective's failure with a report of every rank's part.
  try {
    std::rethrow_exception(strategy_->on_exception(caught));
  } catch (const std::exception& e) {
    const auto* interrupted = dynamic_cast<const Interrupted*>(&e);
    std::string checkpoint;  // written on a stop on request
    if (run != nullptr) {
      run->hooks.call(&Callback::on_exception, e);
      if (interrupted != nullptr && run->stage == Stage::kTrain && options_.fast_dev_run() == 0) {
        // Every rank left the loop at the same step boundary, so the
        // checkpoint's collectives (barrier) are safe here.
        checkpoint = interrupted_checkpoint_path();
        std::filesystem::create_directories(fs::path(checkpoint).parent_path());
        save_checkpoint(checkpoint);
      }
      if (run->ctx.logger != nullptr) run->ctx.logger->finalize(interrupted != nullptr ? "interrupted" : "failed");
      if (run->ctx.profiler != nullptr) run->ctx.profiler->teardown(run->stage);  // what ran until the failure
    }
    strategy_->teardown();
    if (module_ != nullptr) detail::ModuleAccess::detach(*module_);
    module_ = nullptr;
    state_.stage = Stage::kNone;
    if (!checkpoint.empty()) {
      // Every rank names the checkpoint; rank 0 alone says how to resume.
      throw Interrupted(c10::str(e.what(), "; stopped on request: ", checkpoint, " holds the run",
                                 strategy_->is_global_zero() ? Interrupted::resume_hint(checkpoint) : std::string()),
                        interrupted->signal(), checkpoint);
    }
    throw;
  }
}

Metrics Trainer::evaluate(const std::shared_ptr<LightningModule>& module,
                                                const std::function<RunData()>& data, Stage stage,
                                                const std::string& ckpt_path) {
  std::map<std::string, double> metrics;
  run_stage(module, stage, ckpt_path, data, [&](Run& run, RunData& run_data) {
    std::shared_ptr<DataLoader>& loader = run_data.loader;
    LT_CHECK(loader != nullptr, "Trainer::", stage_name(stage), ": no data (the ", stage_name(stage),
             " dataloader is null)");
    prepare_loader(loader, stage);
    const bool test = stage == Stage::kTest;
    const FractionOrCount& limit = test ? options_.limit_test_batches() : options_.limit_val_batches();
    if (const std::string path = resolve_ckpt_path(ckpt_path, run); !path.empty()) restore_weights(path);
    metrics = evaluation_loop_->run(run.ctx, *loader, stage,
                                    loader->limited_size(limit, test ? "limit_test_batches" : "limit_val_batches"));
  });
  return metrics;
}

Metrics Trainer::validate(const std::shared_ptr<LightningModule>& module,
                                                const std::shared_ptr<DataModule>& data,
                                                const std::string& ckpt_path) {
  LT_CHECK(data != nullptr, "Trainer::validate: the data module is null");
  return evaluate(module, [this, data] {
    place(*data);
    data->setup(Stage::kValidate);
    return RunData{data->val_dataloader(), nullptr, {}};
  }, Stage::kValidate, ckpt_path);
}

Metrics Trainer::validate(const std::shared_ptr<LightningModule>& module,
                                                std::shared_ptr<DataLoader> val, const std::string& ckpt_path) {
  return evaluate(module, [&] { return RunData{val, nullptr, {}}; }, Stage::kValidate, ckpt_path);
}

Metrics Trainer::test(const std::shared_ptr<LightningModule>& module,
                                            const std::shared_ptr<DataModule>& data, const std::string& ckpt_path) {
  LT_CHECK(data != nullptr, "Trainer::test: the data module is null");
  return evaluate(module, [this, data] {
    place(*data);
    data->setup(Stage::kTest);
    return RunData{data->test_dataloader(), nullptr, {}};
  }, Stage::kTest, ckpt_path);
}

Metrics Trainer::test(const std::shared_ptr<LightningModule>& module,
                                            std::shared_ptr<DataLoader> test, const std::string& ckpt_path) {
  return evaluate(module, [&] { return RunData{test, nullptr, {}}; }, Stage::kTest, ckpt_path);
}

std::vector<torch::Tensor> Trainer::predict(const std::shared_ptr<LightningModule>& module,
                                            const std::shared_ptr<DataModule>& data, const std::string& ckpt_path) {
  LT_CHECK(data != nullptr, "Trainer::predict: the data module is null");
  return predict_stage(module, [this, data] {
    place(*data);
    data->setup(Stage::kPredict);
    return RunData{data->predict_dataloader(), nullptr, {}};
  }, ckpt_path);
}

std::vector<torch::Tensor> Trainer::predict(const std::shared_ptr<LightningModule>& module,
                                            std::shared_ptr<DataLoader> loader, const std::string& ckpt_path) {
  return predict_stage(module, [&] { return RunData{loader, nullptr, {}}; }, ckpt_path);
}

std::vector<torch::Tensor> Trainer::predict_stage(const std::shared_ptr<LightningModule>& module,
                                                  const std::function<RunData()>& data, const std::string& ckpt_path) {
  std::vector<torch::Tensor> out;
  run_stage(module, Stage::kPredict, ckpt_path, data, [&](Run& run, RunData& run_data) {
    std::shared_ptr<DataLoader>& loader = run_data.loader;
    LT_CHECK(loader != nullptr, "Trainer::predict: no data (the predict dataloader is null)");
    prepare_loader(loader, Stage::kPredict);
    if (const std::string path = resolve_ckpt_path(ckpt_path, run); !path.empty()) restore_weights(path);
    out = prediction_loop_->run(run.ctx, *loader,
                                loader->limited_size(options_.limit_predict_batches(), "limit_predict_batches"));
  });
  return out;
}

}  // namespace lt
