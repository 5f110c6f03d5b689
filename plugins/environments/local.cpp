#include "plugins/environments/local.h"

#include "trainer/check.h"

namespace lt {

bool LocalEnvironment::detect_worker() {
  return env::get(kWorkerVar).value_or("") == "1" && env::get("RANK").has_value();
}

LocalEnvironment::LocalEnvironment() : worker_(detect_worker()) {
  if (!worker_) return;
  rank_ = env::require_int("RANK", "local spawn worker");
  world_size_ = env::require_int("WORLD_SIZE", "local spawn worker");
  port_ = static_cast<int>(env::require_int("MASTER_PORT", "local spawn worker"));
  LT_CHECK(rank_ >= 0 && rank_ < world_size_, "local spawn worker: RANK=", rank_, " is outside [0, WORLD_SIZE=",
           world_size_, ")");
}

}  // namespace lt
