#include <lightning_cpp/plugins/join/join_compatibility.h>

#include <sstream>

#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/collective_layer.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/trainer_options.h>

namespace lt {

namespace {

constexpr const char* kPadFix = "or train with uneven_inputs: pad (DistributedSampler padding, no Join)";

// A SyncBatchNorm that is not a CollectiveLayer (someone's own) cannot be shadowed.
bool has_unshadowed_sync_batch_norm(const LightningModule& module) {
  for (const auto& child : module.modules(/*include_self=*/false)) {
    if (child->name().find("SyncBatchNorm") != std::string::npos &&
        dynamic_cast<const CollectiveLayer*>(child.get()) == nullptr) {
      return true;
    }
  }
  return false;
}

JoinSupport judge_val_check_interval(const TrainerOptions& options) {
  const FractionOrCount& interval = options.val_check_interval();
  const bool mid_epoch = interval.is_count() || interval.fraction() < 1.0;
  if (!mid_epoch) return JoinSupport::compatible();
  return JoinSupport::needs_lockstep(
      "mid-epoch validation runs at iterations of the longest rank's epoch, which a rank that ran out of data "
      "reaches only while joined; it validates there with the model the others hold, which it holds only if it "
      "took every optimizer step with them",
      c10::str("use join_mode: lockstep (the default) with automatic optimization, or set val_check_interval: 1.0 "
               "(use check_val_every_n_epoch for less often), ",
               kPadFix));
}

JoinSupport judge_scheduler_per_step(const JoinSettings& settings) {
  // Lockstep: a joined rank steps its scheduler with the others.
  if (settings.mode == JoinMode::kLockstep) return JoinSupport::compatible();
  return JoinSupport::warn(
      "a per-step LR scheduler steps once per optimizer step, and a rank that joins early takes fewer steps in an "
      "uneven epoch, so its learning rate falls behind the other ranks' from the next epoch on",
      "use join_mode: lockstep, an epoch-interval scheduler (interval: epoch), or uneven_inputs: pad");
}

JoinSupport judge_manual_optimization(const LightningModule& module, const JoinSettings& settings) {
  if (module.collectives().manual_declared) {
    if (settings.mode == JoinMode::kPyTorch) return JoinSupport::compatible();
    return JoinSupport::warn(
        "a joined rank cannot take manual optimization's steps (they are the module's own code), so it steps as in "
        "PyTorch's Join: not at all; its optimizer state falls behind until the epoch's final broadcast of the "
        "parameters",
        "use automatic optimization for lockstep Join");
  }
  return JoinSupport::incompatible(
      "manual optimization decides itself when to call manual_backward and optimizer_step, so Join cannot know "
      "which collectives a joined rank must shadow per iteration",
      c10::str("declare the module's collectives with collectives().manual_declared = true if training_step only "
               "calls manual_backward/optimizer_step once per batch (one DDP gradient sync), ",
               kPadFix));
}

JoinSupport judge_forward_collectives(const std::string& what, const JoinSettings& settings) {
  if (settings.throw_on_early_termination) return JoinSupport::compatible();
  return JoinSupport::incompatible(
      c10::str(what, " issues collectives that no JoinHook shadows: the ranks still training would wait forever "
                     "for the ranks that joined"),
      c10::str("make the layer an lt::CollectiveLayer that shadows them (core/collective_layer.h; lt::SyncBatchNorm "
               "is one), set join_throw_on_early_termination: true (every rank stops with EarlyTerminationError at "
               "the first iteration some rank does not have), ",
               kPadFix));
}

}  // namespace

std::vector<const JoinFeature*> JoinCompatibilityReport::with(JoinCompatibility compatibility) const {
  std::vector<const JoinFeature*> out;
  for (const auto& f : features) {
    if (f.support.compatibility == compatibility) out.push_back(&f);
  }
  return out;
}

std::string JoinCompatibilityReport::refusal_message() const {
  const auto refused = with(JoinCompatibility::kIncompatible);
  std::ostringstream os;
  os << "uneven_inputs: join cannot train this run: " << refused.size() << " feature"
     << (refused.size() == 1 ? " is" : "s are") << " incompatible with Join (ranks with different numbers of batches):";
  int i = 1;
  for (const JoinFeature* f : refused) {
    os << "\n  " << i++ << ". " << f->name << ": " << f->support.reason << ". Fix: " << f->support.fix << ".";
  }
  return os.str();
}

std::vector<std::string> JoinCompatibilityReport::warnings() const {
  std::vector<std::string> out;
  for (const JoinFeature* f : with(JoinCompatibility::kWarn)) {
    out.push_back(c10::str("uneven_inputs: join: ", f->name, ": ", f->support.reason,
                           f->support.fix.empty() ? "" : c10::str(" (", f->support.fix, ")")));
  }
  return out;
}

JoinCompatibilityReport check_join_compatibility(const FeatureSet& features, const JoinSettings& settings) {
  LT_CHECK(features.options != nullptr && features.module != nullptr,
           "check_join_compatibility: the feature set has no options or no module");
  const TrainerOptions& options = *features.options;
  const LightningModule& module = *features.module;
  JoinCompatibilityReport report;
  // A joined rank takes the optimizer steps only in lockstep, and only those of automatic optimization.
  auto add = [&](std::string name, JoinSupport support) {
    if (support.compatibility == JoinCompatibility::kNeedsLockstep && settings.mode == JoinMode::kPyTorch) {
      support.compatibility = JoinCompatibility::kIncompatible;
    } else if (support.compatibility == JoinCompatibility::kNeedsLockstep && !module.automatic_optimization()) {
      support.compatibility = JoinCompatibility::kIncompatible;
      support.reason += " (under manual optimization a joined rank takes no optimizer step: lockstep needs "
                        "automatic optimization)";
    }
    report.features.push_back(JoinFeature{std::move(name), std::move(support)});
  };

  for (const Callback* callback : features.callbacks) {
    add(c10::str("callback ", callback->name()), callback->join_support(options));
  }
  if (features.has_validation) {
    add(c10::str("val_check_interval=", options.val_check_interval().str()), judge_val_check_interval(options));
  }
  if (features.scheduler_per_step) {
    add("a per-step LR scheduler (interval: step)", judge_scheduler_per_step(settings));
  }
  if (!module.automatic_optimization()) add("manual optimization", judge_manual_optimization(module, settings));
  if (has_unshadowed_sync_batch_norm(module)) {
    add("a SyncBatchNorm that is not lt::SyncBatchNorm",
        judge_forward_collectives("it allreduces batch statistics in every forward and", settings));
  }
  const size_t layers = collective_layers(const_cast<LightningModule&>(module)).size();
  if (layers > 0) {
    add(c10::str("collective layers (", layers, ", e.g. lt::SyncBatchNorm)"),
        JoinSupport{JoinCompatibility::kNeedsShadowing,
                    "a rank with no micro-batch shadows their forward and backward collectives", ""});
  }
  if (module.collectives().in_forward) {
    add("collectives in forward (collectives().in_forward)",
        judge_forward_collectives("the module's forward", settings));
  }
  if (module.collectives().in_steps) {
    add("user collectives in steps (collectives().in_steps)",
        judge_forward_collectives("training_step", settings));
  }
  // log(sync_dist=true) in training_step is shadowed by the logging joinable.
  add("log(sync_dist=true)",
      JoinSupport{JoinCompatibility::kNeedsShadowing,
                  "reduced once per micro-batch; joined ranks shadow the reduction with neutral values", ""});
  return report;
}

void enforce_join_compatibility(const FeatureSet& features, const JoinSettings& settings, int64_t rank) {
  if (!settings.enable) return;
  const JoinCompatibilityReport report = check_join_compatibility(features, settings);
  if (!report.ok()) throw JoinCompatibilityError(report.refusal_message());
  if (rank == 0) {
    for (const auto& line : report.warnings()) warn(line);
  }
}

}  // namespace lt
