#include "plugins/environments/torchrun.h"

#include "trainer/check.h"

namespace lt {

bool TorchrunEnvironment::detect() { return env::get("RANK").has_value() && env::get("WORLD_SIZE").has_value(); }

TorchrunEnvironment::TorchrunEnvironment() {
  const bool elastic = env::get("TORCHELASTIC_RUN_ID").has_value();
  name_ = elastic ? "torchrun" : "env";
  const char* where = elastic ? "torchrun" : "environment (RANK/WORLD_SIZE set)";
  rank_ = env::require_int("RANK", where);
  world_size_ = env::require_int("WORLD_SIZE", where);
  LT_CHECK(world_size_ >= 1 && rank_ >= 0 && rank_ < world_size_, where, ": RANK=", rank_,
           " must be in [0, WORLD_SIZE=", world_size_, ")");
  local_world_size_ = env::get_int("LOCAL_WORLD_SIZE");
  // Without LOCAL_RANK every rank is taken to be alone on its node, unless
  // LOCAL_WORLD_SIZE says they all share one.
  local_rank_ = env::get_int("LOCAL_RANK").value_or(local_world_size_ == world_size_ ? rank_ : 0);
  node_rank_ = env::get_int("GROUP_RANK").value_or(env::get_int("NODE_RANK").value_or(0));
  auto address = env::get("MASTER_ADDR");
  auto port = env::get_int("MASTER_PORT");
  if (world_size_ > 1) {
    LT_CHECK(address.has_value(), where, ": MASTER_ADDR is not set; set it to the address of the host of rank 0");
    LT_CHECK(port.has_value(), where, ": MASTER_PORT is not set; set it to a free TCP port on the host of rank 0");
  }
  address_ = address.value_or("127.0.0.1");
  port_ = static_cast<int>(port.value_or(0));
  LT_CHECK(port_ >= 0 && port_ < 65536, where, ": MASTER_PORT=", port_, " is not a TCP port");
}

}  // namespace lt
