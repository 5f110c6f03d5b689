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
  // Started by torchrun itself (TORCHELASTIC_RUN_ID is set): every rank of a job or none.
  static bool by_torchrun();

  TorchrunEnvironment();
  // "torchrun" when TORCHELASTIC_RUN_ID is set, "env" otherwise.
  std::string name() const override { return name_; }
  bool creates_processes_externally() const override { return true; }

 private:
  std::string name_;
};

// Whether torchrun's agent of this process started this worker before in
// this job: after a failure (TORCHELASTIC_RESTART_COUNT > 0), or when the
// group's members changed (a node joined or was lost: torchrun restarts the
// workers then without counting a restart). So that the second is seen too,
// each worker's first start leaves a mark in its agent's log folder (which
// torchrun makes anew for each agent; TORCHELASTIC_ERROR_FILE is in it):
// lightning_cpp.started.<LOCAL_RANK>. False where not by_torchrun(). The
// same answer for every call in a process.
bool torchrun_restarted();

}  // namespace lt
