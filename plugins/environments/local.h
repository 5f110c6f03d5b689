#pragma once
// LocalEnvironment: `devices: N` on one machine with nothing else around.
// The first process (the supervisor) finds no rank in its environment; the
// DDP strategy has it re-exec the program N times (supervise_local_spawn in
// plugins/launchers/subprocess_script.h) with
// LT_LOCAL_SPAWN=1, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1 and MASTER_PORT=<a free port>, and those workers
// find themselves here again, now with creates_processes_externally() true.
// With num_nodes > 1 the same command runs on every node with MASTER_ADDR,
// MASTER_PORT and NODE_RANK set (Lightning's manual multi-node); this
// node's workers then take global ranks node_rank * devices + i.

#include <cstdint>
#include <string>

#include <lightning_cpp/plugins/environments/cluster_environment.h>

namespace lt {

class LocalEnvironment : public ClusterEnvironment {
 public:
  // Set to "1" in the environment of the workers of a local spawn.
  static constexpr const char* kWorkerVar = "LT_LOCAL_SPAWN";
  // The c10d FileStore the workers rendezvous through: a file in a private
  // (0700) directory the supervisor creates and removes, so nothing but
  // gloo's loopback pairs listens on a socket.
  static constexpr const char* kStoreVar = "LT_LOCAL_STORE";
  static bool detect_worker();

  LocalEnvironment();
  std::string name() const override { return "local"; }
  bool creates_processes_externally() const override { return worker_; }

  // Where this node's workers meet the others', in the supervisor. One node:
  // 127.0.0.1 (the supervisor picks the port). Several (Lightning's manual
  // multi-node): the same command on every node with MASTER_ADDR (node 0's
  // address), MASTER_PORT and NODE_RANK set; an lt::ValueError, starting with
  // `who` ("strategy ddp"), names what is missing or out of range.
  struct Nodes {
    int64_t num_nodes = 1;
    int64_t node_rank = 0;
    std::string main_address;
    int main_port = 0;
  };
  Nodes nodes(int64_t num_nodes, const std::string& who) const;

 private:
  bool worker_ = false;
};

}  // namespace lt
