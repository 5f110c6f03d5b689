#include <lightning_cpp/plugins/environments/local.h>

#include <lightning_cpp/core/check.h>

namespace lt {

bool LocalEnvironment::detect_worker() {
  return env::get(kWorkerVar).value_or("") == "1" && env::get("RANK").has_value();
}

LocalEnvironment::LocalEnvironment() : worker_(detect_worker()) {
  if (worker_) {
    ranks_.global_rank = env::require_int("RANK", "local spawn worker");
    ranks_.world_size = env::require_int("WORLD_SIZE", "local spawn worker");
    ranks_.main_port = static_cast<int>(env::require_int("MASTER_PORT", "local spawn worker"));
    LT_CHECK(ranks_.global_rank >= 0 && ranks_.global_rank < ranks_.world_size, "local spawn worker: RANK=",
             ranks_.global_rank, " is outside [0, WORLD_SIZE=", ranks_.world_size, ")");
  }
  // One node (node rank 0, address 127.0.0.1): the local rank and size are
  // the global ones; several nodes (the manual way): the supervisor says.
  ranks_.local_rank = env::get_int("LOCAL_RANK").value_or(ranks_.global_rank);
  ranks_.local_world_size = env::get_int("LOCAL_WORLD_SIZE").value_or(ranks_.world_size);
  ranks_.node_rank = env::get_int("NODE_RANK").value_or(0);
  if (worker_) ranks_.main_address = env::get("MASTER_ADDR").value_or("127.0.0.1");
}

}  // namespace lt
