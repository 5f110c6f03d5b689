#include <lightning_cpp/cli/cli.h>

#include <filesystem>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/StringUtil.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/cli/internal/arguments.h>
#include <lightning_cpp/cli/internal/trainer_section.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/seed.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/loggers/logger_collection.h>
#include <lightning_cpp/loops/fit_loop.h>
#include <lightning_cpp/trainer/trainer.h>
#include <lightning_cpp/tuner/tuning.h>

namespace lt::cli {

namespace fs = std::filesystem;

using detail::fail;
using detail::init_args_of;
using detail::join_path;
using detail::trainer_options_from;
using detail::trainer_schema;

namespace {

template <typename T>
std::shared_ptr<T> build_class(const ConfigNode& resolved, const std::string& path, const Registry& registry,
                               const TrainerOptions* trainer) {
  const ConfigNode& cp = *resolved.find("class_path");
  const auto& entry = registry.get<T>(cp.value);
  const std::string args_path = join_path(path, "init_args");
  InitArgs args = init_args_of(entry.schema, *resolved.find("init_args"), args_path, trainer);
  try {
    auto object = entry.factory(args);
    LT_CHECK(object != nullptr, "the factory of ", RegistryKind<T>::kName, " '", cp.value, "' returned null");
    return object;
  } catch (const ValueError& e) {
    // Name the class unless the message already starts with it.
    const std::string msg = e.what();
    fail(cp.source, args_path, msg.rfind(cp.value, 0) == 0 ? msg : c10::str(cp.value, ": ", msg));
  }
}

// Lightning's SaveConfigCallback: the resolved config beside the run's logs,
// with the files added to `files` before the fit (lr_find.svg).
class SaveConfigCallback : public Callback {
 public:
  explicit SaveConfigCallback(std::shared_ptr<std::map<std::string, std::string>> files) : files_(std::move(files)) {}
  std::string name() const override { return "SaveConfigCallback"; }
  void setup(Trainer& trainer, LightningModule&, Stage stage) override {
    // fast_dev_run writes nothing (Lightning's suppressed logging).
    if (stage != Stage::kTrain || !trainer.is_global_zero() || trainer.options().fast_dev_run() > 0) return;
    fs::create_directories(trainer.log_dir());
    for (const auto& [name, text] : *files_) replace_file((fs::path(trainer.log_dir()) / name).string(), text);
  }

 private:
  std::shared_ptr<std::map<std::string, std::string>> files_;
};

// The model's init arg a LearningRateFinder sets: attr_name, else lr or
// learning_rate; a located error (exit 2) where it has none.
std::string lr_init_arg(const LearningRateFinder& finder, const ConfigNode& callback, const std::string& path,
                        const RegistryEntry<LightningModule>& model) {
  const std::string& attr = finder.options().attr_name();
  for (const std::string& name : attr.empty() ? std::vector<std::string>{"lr", "learning_rate"}
                                              : std::vector<std::string>{attr}) {
    if (model.schema.find(name) != nullptr) return name;
  }
  fail(callback.source, join_path(path, "init_args"),
       c10::str("LearningRateFinder: the model ", model.name, " has no init arg ",
                attr.empty() ? std::string("'lr' or 'learning_rate'") : "'" + attr + "'",
                " to set the suggested learning rate to (its init args: ", c10::Join(", ", model.schema.names()),
                "); give attr_name, or update_attr: false"));
}

}  // namespace

RunObjects build_run(const ConfigNode& resolved, const Registry& registry, const std::string& subcommand) {
  RunObjects run;
  const ConfigNode& t = *resolved.find("trainer");
  const InitArgs trainer_args = init_args_of(trainer_schema(), t, "trainer", nullptr);
  run.trainer = trainer_options_from(trainer_args);
  if (const ConfigNode& seed = *resolved.find("seed_everything"); seed.is_scalar()) {
    run.trainer.seed(static_cast<uint64_t>(std::stoll(seed.value)));
  }
  // As LightningCLI: seed before the model is built, so its initial weights are reproducible.
  if (run.trainer.seed()) seed_everything(*run.trainer.seed());

  std::vector<std::shared_ptr<Callback>> callbacks;
  const ConfigNode& cbs = *resolved.find("callbacks");
  bool has_checkpoint = false;
  size_t lr_finder_index = 0;
  for (size_t i = 0; i < cbs.items.size(); ++i) {
    auto cb = build_class<Callback>(cbs.items[i], c10::str("callbacks[", i, "]"), registry, &run.trainer);
    has_checkpoint |= dynamic_cast<ModelCheckpoint*>(cb.get()) != nullptr;
    if (auto finder = std::dynamic_pointer_cast<LearningRateFinder>(cb)) {
      // Runs before fit (run_lr_finder), not in it; other subcommands have no fit to tune.
      if (subcommand == "fit") run.lr_finder = std::move(finder), lr_finder_index = i;
      continue;
    }
    callbacks.push_back(std::move(cb));
  }
  // In every subcommand, as Lightning's Trainer adds it: validate, test and
  // predict find ckpt_path best and last through it.
  if (trainer_args.get_bool("enable_checkpointing") && !has_checkpoint) {
    callbacks.push_back(std::make_shared<ModelCheckpoint>());
  }
  run.log_files = std::make_shared<std::map<std::string, std::string>>();
  (*run.log_files)["config.yaml"] = to_yaml(resolved);
  if (subcommand == "fit") callbacks.push_back(std::make_shared<SaveConfigCallback>(run.log_files));
  run.trainer.callbacks(std::move(callbacks));

  const ConfigNode& logger = *resolved.find("logger");
  if (logger.is_scalar()) run.trainer.default_logger(false);  // logger: false
  if (logger.is_map()) run.trainer.logger(build_class<Logger>(logger, "logger", registry, &run.trainer));
  if (logger.is_list()) {
    std::vector<std::shared_ptr<Logger>> loggers;
    for (size_t i = 0; i < logger.items.size(); ++i) {
      loggers.push_back(build_class<Logger>(logger.items[i], c10::str("logger[", i, "]"), registry, &run.trainer));
    }
    run.trainer.logger(std::make_shared<LoggerCollection>(std::move(loggers)));
  }
  run.trainer.strategy(build_class<Strategy>(*resolved.find("strategy"), "strategy", registry, &run.trainer));
  if (const ConfigNode& scheduler = *resolved.find("lr_scheduler"); scheduler.is_map()) {
    run.trainer.lr_scheduler(build_class<LRSchedulerSpec>(scheduler, "lr_scheduler", registry, &run.trainer));
  }
  run.fit_loop = build_class<FitLoop>(*resolved.find("fit_loop"), "fit_loop", registry, &run.trainer);
  const ConfigNode& model = *resolved.find("model");
  if (run.lr_finder && run.lr_finder->options().update_attr()) {
    const std::string path = c10::str("callbacks[", lr_finder_index, "]");
    const auto& entry = registry.get<LightningModule>(model.find("class_path")->value);
    run.lr_init_arg = lr_init_arg(*run.lr_finder, cbs.items[lr_finder_index], path, entry);
    run.model_with_lr = [model, &registry, trainer = run.trainer, arg = run.lr_init_arg](double lr) {
      ConfigNode with_lr = model;
      std::ostringstream value;
      value.precision(17);
      value << lr;
      with_lr.find("init_args")->set(arg, ConfigNode::scalar(value.str()));
      return build_class<LightningModule>(with_lr, "model", registry, &trainer);
    };
  }
  run.model = build_class<LightningModule>(model, "model", registry, &run.trainer);
  run.data = build_class<DataModule>(*resolved.find("data"), "data", registry, &run.trainer);
  const ConfigNode& ckpt = *resolved.find("ckpt_path");
  if (ckpt.is_scalar()) run.ckpt_path = ckpt.value;
  return run;
}

void run_lr_finder(RunObjects& run, Trainer& trainer, std::ostream& out) {
  // The model's init arg takes the suggestion, not its hparams.
  const LRFinderOptions options = LRFinderOptions(run.lr_finder->options()).update_attr(false);
  const LRFinder sweep = Tuner(trainer).lr_find(run.model, run.data, options);
  const std::optional<double> lr = sweep.suggestion();
  if (lr && run.model_with_lr) {
    // As Lightning's: the model as it was before the sweep, with the suggested rate.
    auto tuned = run.model_with_lr(*lr);
    load_module_state_dict(*tuned, module_state_dict(*run.model));
    run.model = std::move(tuned);
  }
  (*run.log_files)["lr_find.svg"] = sweep.plot();
  if (!trainer.is_global_zero()) return;
  out << "LearningRateFinder: " << sweep.lrs.size() << " rates tried; ";
  if (!lr) {
    out << "no suggestion\n";
  } else {
    out << "suggestion " << *lr << (run.model_with_lr ? " set as model.init_args." + run.lr_init_arg : "") << "\n";
  }
  out << "LearningRateFinder: the plot is lr_find.svg in the run's log folder\n";
}

}  // namespace lt::cli
