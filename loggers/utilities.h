#pragma once
// What the file loggers (CSVLogger, TensorBoardLogger) share: the version
// folders under <save_dir>/<name> and hparams.yaml, laid out as Lightning's
// loggers lay them out.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/types.h>

namespace lt {

// The highest N of the folders <save_dir>/<name>/version_N, or -1 if there
// is none (or no such folder). The next free version is that + 1.
int64_t newest_version(const std::string& save_dir, const std::string& name);

// YAML's save_dir of a file logger (version_folder_options.def): a folder, or null for the
// Trainer's default_root_dir ("." outside the CLI).
struct SaveDirOrRootDir {
  static void add(ArgSchema& schema, const char* name, const std::string& d, const char* doc,
                  std::vector<std::string> choices);
  static std::string read(const InitArgs& args, const char* name);
  static std::string show(const std::string& save_dir) { return OptionCodec<std::string>::show(save_dir); }
};

// A file logger's folder <save_dir>/<name>/version_<N>. N is the given
// version, else fixed at the first version() call: the next free one, or, in
// a run that goes on with an earlier one (continue_previous), the newest,
// or the one a resumed checkpoint lies in (continue_version_of).
// Checks the name and version, naming `logger` in the error.
class VersionFolder {
 public:
  VersionFolder(const char* logger, std::string save_dir, std::string name, std::optional<int64_t> version);
  int64_t version() const;
  std::string path() const;
  void continue_previous();
  // The version whose folder holds `checkpoint`, if it is one of these
  // folders (at any depth) and no version was given; true if so.
  bool continue_version_of(const std::string& checkpoint);

 private:
  std::string save_dir_, name_;
  mutable std::optional<int64_t> version_;
};

// Replaces `path` (atomically, core/files.h) with `params` as a YAML map,
// "{}" when there are none, typed as PyYAML writes Lightning's: numbers and
// bools plain (lr: 1.0e-07, exact), strings quoted where they would read as
// something else (hidden: '8').
void save_hparams_to_yaml(const std::string& path, const HParams& params);

}  // namespace lt
