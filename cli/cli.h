#pragma once
// The lightning-cpp command, in the style of LightningCLI:
//
//   lightning-cpp fit|validate|test|predict --config a.yaml [--config b.yaml]
//       [--trainer.max_epochs=3 --model.init_args.hidden=128 ...] [--plugin libmine.so]
//       [--print_config] [--help]
//
// Config files merge in order, then the dotted overrides apply in order. The
// whole config is checked against the registry before anything is built or
// written: an unknown key, a wrong type or an unknown class name is reported
// with its file, line and key path, and the command exits with code 2.
//
// Config schema (top-level keys):
//   seed_everything: int | null
//   trainer: {TrainerOptions fields, enable_checkpointing}
//   model:, data:            {class_path: <name>, init_args: {...}} (or just <name>)
//   callbacks:               [{class_path, init_args}, ...]
//   logger:                  true (CSVLogger) | false | {class_path, init_args}
//   strategy:                <name> | {class_path, init_args}   (also accepted under trainer:)
//   fit_loop:                {class_path, init_args}
//   ckpt_path:               path | null   (fit: resume; validate/test/predict: weights)
//   plugins:                 [path/to/libplugin.so, ...]

#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/cli/config.h>
#include <lightning_cpp/core/trainer_options.h>

namespace lt {
class Registry;
class LightningModule;
class DataModule;
class FitLoop;
class LearningRateFinder;
class Trainer;
}  // namespace lt

namespace lt::cli {

// 3: stopped on request (a signal), resumable from the checkpoint it names (core/signals.h).
enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitConfigError = 2 };

int main(int argc, char** argv, Registry& registry);
// `args` without the program name; output goes to `out` and `err`.
// `program`: the name --help shows (main passes its argv[0]'s file name).
int run(const std::vector<std::string>& args, Registry& registry, std::ostream& out, std::ostream& err,
        const std::string& program = "lightning-cpp");

// -- the pieces, for tests and programs that embed the CLI ------------------------------

// Checks `config` against the registry and fills in every default; throws
// lt::ValueError "<file>:<line>: <key.path>: <problem>". `subcommand` is fit,
// validate, test or predict. Plugins must already be loaded.
ConfigNode resolve_config(const ConfigNode& config, const Registry& registry, const std::string& subcommand);

struct RunObjects {
  TrainerOptions trainer;  // with callbacks, logger and strategy
  std::shared_ptr<LightningModule> model;
  std::shared_ptr<DataModule> data;
  std::shared_ptr<FitLoop> fit_loop;
  std::string ckpt_path;
  // fit with a LearningRateFinder among the callbacks (not one of the
  // Trainer's): run_lr_finder runs its sweep before the fit.
  std::shared_ptr<LearningRateFinder> lr_finder;
  // The model built again with its init arg lr_init_arg set (update_attr).
  std::function<std::shared_ptr<LightningModule>(double lr)> model_with_lr;
  std::string lr_init_arg;
  // Files rank 0 writes beside config.yaml in the fit's log folder at its setup: name, text.
  std::shared_ptr<std::map<std::string, std::string>> log_files;
};
// Builds the objects of a resolved config (factories run here; their
// lt::ValueErrors get the location of the class that failed).
RunObjects build_run(const ConfigNode& resolved, const Registry& registry, const std::string& subcommand);
// LightningCLI's LearningRateFinder: lr_find on `trainer` (tuner/tuning.h),
// then (update_attr) run.model built again with the suggestion as its
// lr_init_arg and the weights it had, and lr_find.svg among run.log_files.
// Prints the suggestion on rank 0.
void run_lr_finder(RunObjects& run, Trainer& trainer, std::ostream& out);

}  // namespace lt::cli
