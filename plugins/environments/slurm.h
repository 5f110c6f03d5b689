#pragma once
// SlurmEnvironment: ranks started by `srun` (one task per rank):
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID. The rendezvous is
// MASTER_ADDR/MASTER_PORT when set, else the first host of SLURM_NODELIST
// and 15000 + the last four digits of SLURM_JOB_ID (as Lightning does).
// An interactive allocation (SLURM_JOB_NAME bash or interactive) is not
// taken as a SLURM launch.

#include <lightning_cpp/plugins/environments/cluster_environment.h>

namespace lt {

class SlurmEnvironment : public ClusterEnvironment {
 public:
  static bool detect();
  // "node[003-005,9],gpu1" -> "node003" (Lightning's resolve_root_node_address).
  static std::string resolve_root_node_address(const std::string& nodelist);

  SlurmEnvironment();
  std::string name() const override { return "slurm"; }
  bool creates_processes_externally() const override { return true; }
};

}  // namespace lt
