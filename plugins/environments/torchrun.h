#pragma once
// TorchrunEnvironment: ranks started by torchrun
// (`torchrun --no-python --nproc-per-node N ./binary ...`), or by anything
// that sets the generic variables RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (and optionally LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK).
// Multi-node works through MASTER_ADDR: every rank rendezvouses at the
// TCPStore there, which rank 0 hosts, or torchrun's agent when it says so
// (TORCHELASTIC_USE_AGENT_STORE=True, its static rendezvous: every rank
// connects as a client, as PyTorch's workers do).

#include <lightning_cpp/plugins/environments/cluster_environment.h>

namespace lt {

class TorchrunEnvironment : public ClusterEnvironment {
 public:
  // RANK and WORLD_SIZE are set.
  static bool detect();

  TorchrunEnvironment();
  // "torchrun" when TORCHELASTIC_RUN_ID is set, "env" otherwise.
  std::string name() const override { return name_; }
  bool creates_processes_externally() const override { return true; }

 private:
  std::string name_;
};

}  // namespace lt
