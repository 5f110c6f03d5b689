#pragma once
// SlurmEnvironment: ranks started by `srun` (one task per rank):
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID. The rendezvous is
// MASTER_ADDR/MASTER_PORT when set, else the first host of SLURM_NODELIST
// and 15000 + the last four digits of SLURM_JOB_ID (as Lightning does).
// An interactive allocation (SLURM_JOB_NAME bash or interactive) is not
// taken as a SLURM launch.

#include "plugins/environments/cluster_environment.h"

namespace lt {

class SlurmEnvironment : public ClusterEnvironment {
 public:
  static bool detect();
  // "node[003-005,9],gpu1" -> "node003" (Lightning's resolve_root_node_address).
  static std::string resolve_root_node_address(const std::string& nodelist);

  SlurmEnvironment();
  std::string name() const override { return "slurm"; }
  bool creates_processes_externally() const override { return true; }
  std::string main_address() const override { return address_; }
  int main_port() const override { return port_; }
  int64_t world_size() const override { return world_size_; }
  int64_t global_rank() const override { return rank_; }
  int64_t local_rank() const override { return local_rank_; }
  int64_t node_rank() const override { return node_rank_; }
  std::optional<int64_t> local_world_size() const override { return local_world_size_; }

 private:
  std::string address_;
  int port_ = 0;
  int64_t world_size_ = 1, rank_ = 0, local_rank_ = 0, node_rank_ = 0;
  std::optional<int64_t> local_world_size_;
};

}  // namespace lt
