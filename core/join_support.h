#pragma once
// How a callback or feature behaves when ranks have uneven inputs and the DDP
// strategy trains under Join. The DDP strategy collects one JoinSupport from
// every callback and feature before the first step and refuses the run if any
// is kIncompatible (listing all of them, each with its reason and fix).

#include <string>

namespace lt {

enum class JoinCompatibility {
  kCompatible,      // issues no collective while ranks may be joined
  kNeedsShadowing,  // issues collectives that joined ranks shadow (e.g. sync_dist logging)
  kNeedsLockstep,   // issues collectives in optimizer-step hooks or at iteration ends (mid-epoch
                    // validation), which a joined rank runs only in lockstep Join with automatic
                    // optimization: compatible there, refused otherwise
  kWarn,            // runs, but the behaviour differs across ranks (e.g. per-step LR schedules)
  kIncompatible,    // would hang or diverge under Join: the run is refused
};

struct JoinSupport {
  JoinCompatibility compatibility = JoinCompatibility::kCompatible;
  std::string reason;  // why, for the refusal message
  std::string fix;     // what the user can change

  static JoinSupport compatible() { return {}; }
  static JoinSupport warn(std::string reason, std::string fix = {}) {
    return {JoinCompatibility::kWarn, std::move(reason), std::move(fix)};
  }
  static JoinSupport needs_lockstep(std::string reason, std::string fix) {
    return {JoinCompatibility::kNeedsLockstep, std::move(reason), std::move(fix)};
  }
  static JoinSupport incompatible(std::string reason, std::string fix) {
    return {JoinCompatibility::kIncompatible, std::move(reason), std::move(fix)};
  }
};

}  // namespace lt
