#pragma once
// The Join-compatibility check: before the first step of a fit with uneven
// inputs under Join, every callback and feature of the run says how it
// behaves while some ranks have joined (core/join_support.h). The check is
// a pure function of the run's configuration, so every rank reaches the same
// verdict without a collective; the DDP strategy runs it in check_features()
// and a refusal lists every problem at once, each with its reason and fix.

#include <string>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/join_support.h>
#include <lightning_cpp/core/strategy.h>

namespace lt {

// What a rank that ran out of data does while the others train.
enum class JoinMode {
  // It takes every optimizer step with the others, on the gradient it
  // receives in the allreduces it shadows: replicas stay identical (optimizer
  // and scheduler state, global_step), so per-step features work.
  kLockstep,
  // PyTorch's Join: it only shadows the collectives and does not step; the
  // last joiner's parameters are broadcast at the end of the epoch, but the
  // early joiner's optimizer state, scheduler and step count fall behind.
  kPyTorch,
};

// How the DDP strategy runs Join (DDPStrategyOptions join_*).
struct JoinSettings {
  bool enable = true;
  bool throw_on_early_termination = false;
  bool divide_by_initial_world_size = true;
  JoinMode mode = JoinMode::kLockstep;
};

// One feature of the run and its verdict.
struct JoinFeature {
  std::string name;  // e.g. "callback ModelCheckpoint", "val_check_interval=0.5"
  JoinSupport support;
};

struct JoinCompatibilityReport {
  std::vector<JoinFeature> features;  // everything judged, in a stable order
  std::vector<const JoinFeature*> with(JoinCompatibility compatibility) const;
  bool ok() const { return with(JoinCompatibility::kIncompatible).empty(); }
  // The refusal: every incompatible feature with its reason and fix.
  std::string refusal_message() const;
  // One line per kWarn feature.
  std::vector<std::string> warnings() const;
};

// A run refused before its first step. A ValueError: the CLI exits non-zero (2).
class JoinCompatibilityError : public ValueError {
 public:
  using ValueError::ValueError;
};

// Judges every feature of the run for training under Join with `settings`.
JoinCompatibilityReport check_join_compatibility(const FeatureSet& features, const JoinSettings& settings);

// check_join_compatibility, then: throws JoinCompatibilityError if any feature
// is incompatible; otherwise prints the warnings (on rank 0 only).
void enforce_join_compatibility(const FeatureSet& features, const JoinSettings& settings, int64_t rank);

}  // namespace lt
