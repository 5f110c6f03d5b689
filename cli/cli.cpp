#include <lightning_cpp/cli/cli.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>

#include <lightning_cpp/cli/internal/arguments.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/loops/fit_loop.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/plugins/launchers/error_file.h>
#include <lightning_cpp/plugins/join/join_compatibility.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt::cli {

namespace fs = std::filesystem;

using detail::fail;
using detail::kSubcommands;
using detail::kTopLevelKeys;
using detail::valid_keys_hint;

// -- the command -----------------------------------------------------------------------------

namespace {

std::string usage_footer(const Registry& registry) {
  return "\nConfig keys: seed_everything, trainer, model, data, callbacks, logger, strategy, fit_loop, ckpt_path, "
         "plugins.\nOverride any key with --key.path=value, e.g. --trainer.max_epochs=3 "
         "--model.init_args.hidden=128.\n\nRegistered (load more with --plugin path/to/lib.so):\n" +
         registry.describe();
}

// --plugin is read before anything else so that --help lists what plugins register.
std::vector<std::string> plugin_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plugin" && i + 1 < args.size()) out.push_back(args[++i]);
    else if (args[i].rfind("--plugin=", 0) == 0) out.push_back(args[i].substr(9));
  }
  return out;
}

void print_metrics(std::ostream& out, const std::string& title, const std::map<std::string, double>& metrics) {
  out << title << "\n";
  for (const auto& [k, v] : metrics) out << "  " << k << ": " << v << "\n";
}

int execute(const std::string& subcommand, const std::vector<std::string>& configs,
            const std::vector<std::string>& extras, const std::vector<std::string>& plugins, bool print_config,
            Registry& registry, std::ostream& out) {
  ConfigNode root = ConfigNode::map();
  for (const auto& path : configs) {
    ConfigNode file = load_config_file(path);
    if (root.entries.empty()) root.source = file.source;
    merge_config(root, file);
  }
  for (size_t i = 0; i < extras.size(); ++i) {
    const std::string& arg = extras[i];
    LT_CHECK_VALUE(arg.rfind("--", 0) == 0 && arg.size() > 2, "command line '", arg,
                   "': unexpected argument (overrides look like --trainer.max_epochs=3)");
    std::string key = arg.substr(2), value;
    std::string shown = arg;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      LT_CHECK_VALUE(i + 1 < extras.size() && extras[i + 1].rfind("--", 0) != 0, "command line '", arg,
                     "': missing value (use ", arg, "=<value>)");
      value = extras[++i];
      shown = arg + "=" + value;
    }
    const std::string top = key.substr(0, key.find('.'));
    if (std::find(kTopLevelKeys.begin(), kTopLevelKeys.end(), top) == kTopLevelKeys.end()) {
      throw ValueError(c10::str("command line '", shown, "': ", valid_keys_hint(top, kTopLevelKeys)));
    }
    apply_override(root, key, value, shown);
  }
  // Plugins named in the configs, then on the command line.
  if (const ConfigNode* p = root.find("plugins"); p != nullptr && !p->is_null()) {
    if (!p->is_list()) fail(p->source, "plugins", c10::str("expected a list of paths, got ", p->describe()));
    for (size_t i = 0; i < p->items.size(); ++i) {
      const ConfigNode& item = p->items[i];
      if (!item.is_scalar()) fail(item.source, c10::str("plugins[", i, "]"), "expected a path, got " + item.describe());
      try {
        registry.load_plugin(item.value);
      } catch (const ValueError& e) {
        fail(item.source, c10::str("plugins[", i, "]"), e.what());
      }
    }
  }
  for (const auto& path : plugins) registry.load_plugin(path);

  const ConfigNode resolved = resolve_config(root, registry, subcommand);
  if (print_config) {
    out << to_yaml(resolved);
    return kExitOk;
  }
  RunObjects run = build_run(resolved, registry, subcommand);
  Trainer trainer(run.trainer);
  trainer.set_fit_loop(run.fit_loop);
  if (subcommand == "fit") {
    if (run.lr_finder) run_lr_finder(run, trainer, out);
    trainer.fit(run.model, run.data, run.ckpt_path);
    return kExitOk;
  }
  if (subcommand == "validate") {
    auto metrics = trainer.validate(run.model, run.data, run.ckpt_path);
    if (trainer.is_global_zero()) print_metrics(out, "Validation metrics:", metrics);
  } else if (subcommand == "test") {
    auto metrics = trainer.test(run.model, run.data, run.ckpt_path);
    if (trainer.is_global_zero()) print_metrics(out, "Test metrics:", metrics);
  } else {
    auto predictions = trainer.predict(run.model, run.data, run.ckpt_path);
    if (trainer.is_global_zero()) {
      fs::create_directories(trainer.log_dir());
      const std::string path = (fs::path(trainer.log_dir()) / "predictions.pt").string();
      c10::List<torch::Tensor> list;
      for (const auto& p : predictions) list.push_back(p.cpu());
      atomic_pickle_save(list, path);
      out << "Wrote " << predictions.size() << " prediction batches to " << path << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

int run(const std::vector<std::string>& args, Registry& registry, std::ostream& out, std::ostream& err,
        const std::string& program) {
  try {
    for (const auto& path : plugin_args(args)) registry.load_plugin(path);
  } catch (const ValueError& e) {
    err << "error: " << e.what() << "\n";
    return kExitConfigError;
  }

  CLI::App app{program + ": train, validate, test or predict from YAML configs", program};
  app.require_subcommand(1);
  app.footer(usage_footer(registry));
  std::vector<std::string> top_plugins;
  app.add_option("--plugin", top_plugins, "load a plugin shared library by path (repeatable)");
  struct Sub {
    CLI::App* app;
    std::vector<std::string> configs, plugins;
    bool print_config = false;
  };
  std::vector<Sub> subs(kSubcommands.size());
  const std::map<std::string, std::string> docs = {{"fit", "train the model (resume with ckpt_path)"},
                                                    {"validate", "run one validation epoch"},
                                                    {"test", "run the test set"},
                                                    {"predict", "predict and save <log_dir>/predictions.pt"}};
  for (size_t i = 0; i < kSubcommands.size(); ++i) {
    Sub& s = subs[i];
    s.app = app.add_subcommand(kSubcommands[i], docs.at(kSubcommands[i]));
    s.app->add_option("-c,--config", s.configs, "a YAML config; repeatable, later files override earlier ones");
    s.app->add_flag("--print_config", s.print_config, "print the fully resolved config and exit");
    s.app->add_option("--plugin", s.plugins, "load a plugin shared library by path (repeatable)");
    s.app->allow_extras();
    s.app->footer(usage_footer(registry));
  }

  std::vector<const char*> argv{program.c_str()};
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? kExitOk : kExitConfigError;
  }

  for (const Sub& s : subs) {
    if (!s.app->parsed()) continue;
    // Exit 2 says nothing happened: an input error found after the run wrote
    // a file (a monitored key never logged, found at the first checkpoint)
    // is a failure of the run (1), with the same message.
    const int64_t written_before = files_written();
    const auto input_error = [&] { return files_written() == written_before ? kExitConfigError : kExitFailure; };
    try {
      return execute(s.app->get_name(), s.configs, s.app->remaining(), s.plugins, s.print_config, registry, out);
    } catch (const Interrupted& e) {
      // Stopped on request: not a failure. Rank 0 says how to resume.
      const bool resumable = !e.checkpoint().empty() && rank_zero_env_rank() == 0;
      err << program << ": " << (resumable ? e.without_resume_hint() : std::string(e.what())) << "\n";
      if (resumable) {
        err << program << ": to resume: " << program << " " << s.app->get_name();
        for (const auto& config : s.configs) err << " -c " << config;
        for (const auto& extra : s.app->remaining()) {
          if (extra.rfind("--ckpt_path", 0) != 0) err << " " << extra;
        }
        err << " --ckpt_path=" << e.checkpoint() << "\n";
      }
      return kExitStoppedOnRequest;
    } catch (const JoinCompatibilityError& e) {
      // Every rank refuses alike before the first step: where each rank
      // prints its own error, rank 0 prints the list and the others a line.
      std::optional<std::string> printed;
      if (rank_zero_env_rank() != 0) {
        printed = c10::str("rank ", rank_zero_env_rank(), ": the run was refused before the first step (rank 0 ",
                           "printed why)");
      }
      report_failure(err, e.what(), printed);
      return input_error();
    } catch (const ValueError& e) {
      report_failure(err, e.what());
      return input_error();
    } catch (const std::exception& e) {
      report_failure(err, error_message(e));
      return kExitFailure;
    }
  }
  return kExitConfigError;
}

int main(int argc, char** argv, Registry& registry) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::string program = argc > 0 ? fs::path(argv[0]).filename().string() : program_name();
  set_program_name(program);  // the library's messages begin with it
  return run(args, registry, std::cout, std::cerr, program);
}

}  // namespace lt::cli
