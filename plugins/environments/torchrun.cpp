#include <lightning_cpp/plugins/environments/torchrun.h>

#include <filesystem>
#include <fstream>

#include <lightning_cpp/core/check.h>

namespace lt {

bool TorchrunEnvironment::detect() { return env::get("RANK").has_value() && env::get("WORLD_SIZE").has_value(); }

bool TorchrunEnvironment::by_torchrun() { return env::get("TORCHELASTIC_RUN_ID").has_value(); }

TorchrunEnvironment::TorchrunEnvironment() {
  const bool elastic = by_torchrun();
  name_ = elastic ? "torchrun" : "env";
  const char* where = elastic ? "torchrun" : "environment (RANK/WORLD_SIZE set)";
  ranks_.global_rank = env::require_int("RANK", where);
  ranks_.world_size = env::require_int("WORLD_SIZE", where);
  LT_CHECK(ranks_.world_size >= 1 && ranks_.global_rank >= 0 && ranks_.global_rank < ranks_.world_size, where,
           ": RANK=", ranks_.global_rank, " must be in [0, WORLD_SIZE=", ranks_.world_size, ")");
  ranks_.local_world_size = env::get_int("LOCAL_WORLD_SIZE");
  // Without LOCAL_RANK every rank is taken to be alone on its node, unless
  // LOCAL_WORLD_SIZE says they all share one.
  ranks_.local_rank =
      env::get_int("LOCAL_RANK").value_or(ranks_.local_world_size == ranks_.world_size ? ranks_.global_rank : 0);
  ranks_.node_rank = env::get_int("GROUP_RANK").value_or(env::get_int("NODE_RANK").value_or(0));
  auto address = env::get("MASTER_ADDR");
  auto port = env::get_int("MASTER_PORT");
  if (ranks_.world_size > 1) {
    LT_CHECK(address.has_value(), where, ": MASTER_ADDR is not set; set it to the address of the host of rank 0");
    LT_CHECK(port.has_value(), where, ": MASTER_PORT is not set; set it to a free TCP port on the host of rank 0");
  }
  ranks_.main_address = address.value_or("127.0.0.1");
  ranks_.main_port = static_cast<int>(port.value_or(0));
  LT_CHECK(ranks_.main_port >= 0 && ranks_.main_port < 65536, where, ": MASTER_PORT=", ranks_.main_port,
           " is not a TCP port");
  // torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT (static
  // rendezvous); PyTorch's workers then connect to it under this prefix.
  if (env::get("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") {
    ranks_.agent_store_prefix = c10::str("/worker/attempt_", env::get_int("TORCHELASTIC_RESTART_COUNT").value_or(0));
  }
}

bool torchrun_restarted() {
  static const bool restarted = [] {
    if (env::get_int("TORCHELASTIC_RESTART_COUNT").value_or(0) > 0) return true;
    // <agent's log folder>/attempt_<restart count>/<local rank>/error.json
    const std::optional<std::string> error_file = env::get("TORCHELASTIC_ERROR_FILE");
    const size_t at = error_file ? error_file->rfind("/attempt_") : std::string::npos;
    if (!TorchrunEnvironment::by_torchrun() || at == std::string::npos) return false;
    const std::filesystem::path mark = std::filesystem::path(error_file->substr(0, at)) /
                                       c10::str("lightning_cpp.started.", env::get_int("LOCAL_RANK").value_or(0));
    std::error_code ec;
    if (std::filesystem::exists(mark, ec)) return true;
    std::ofstream(mark) << "a worker of this torchrun agent started; a later start is a restart\n";
    return false;
  }();
  return restarted;
}

}  // namespace lt
