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

LocalEnvironment::Nodes LocalEnvironment::nodes(int64_t num_nodes, const std::string& who) const {
  Nodes nodes;
  if (num_nodes <= 1) return nodes;
  const auto address = env::get("MASTER_ADDR");
  const auto port = env::get_int("MASTER_PORT");
  const auto node = env::get_int("NODE_RANK");
  LT_CHECK_VALUE(address && port && node, who, ": num_nodes=", num_nodes,
                 " needs ranks started by a cluster launcher (torchrun, srun, mpirun), or the same command on "
                 "every node with MASTER_ADDR (the address of node 0), MASTER_PORT and NODE_RANK set; missing:",
                 address ? "" : " MASTER_ADDR", port ? "" : " MASTER_PORT", node ? "" : " NODE_RANK");
  LT_CHECK_VALUE(*node >= 0 && *node < num_nodes, who, ": NODE_RANK=", *node, " must be in [0, num_nodes=", num_nodes,
                 ")");
  nodes.num_nodes = num_nodes;
  nodes.node_rank = *node;
  nodes.main_address = *address;
  nodes.main_port = static_cast<int>(*port);
  return nodes;
}

}  // namespace lt
