#pragma once
// TorchrunEnvironment: ranks started by torchrun
// (`torchrun --no-python --nproc-per-node N ./binary ...`), or by anything
// that sets the generic variables RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (and optionally LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK/NODE_RANK).
// Multi-node works through MASTER_ADDR: every rank rendezvouses at the
// TCPStore rank 0 hosts there.

#include "plugins/environments/cluster_environment.h"

namespace lt {

class TorchrunEnvironment : public ClusterEnvironment {
 public:
  // RANK and WORLD_SIZE are set.
  static bool detect();

  TorchrunEnvironment();
  // "torchrun" when TORCHELASTIC_RUN_ID is set, "env" otherwise.
  std::string name() const override { return name_; }
  bool creates_processes_externally() const override { return true; }
  std::string main_address() const override { return address_; }
  int main_port() const override { return port_; }
  int64_t world_size() const override { return world_size_; }
  int64_t global_rank() const override { return rank_; }
  int64_t local_rank() const override { return local_rank_; }
  int64_t node_rank() const override { return node_rank_; }
  std::optional<int64_t> local_world_size() const override { return local_world_size_; }

 private:
  std::string name_;
  std::string address_;
  int port_ = 0;
  int64_t world_size_ = 1, rank_ = 0, local_rank_ = 0, node_rank_ = 0;
  std::optional<int64_t> local_world_size_;
};

}  // namespace lt
