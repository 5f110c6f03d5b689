#pragma once
// ClusterEnvironment: where this process comes from and who its peers are
// (Lightning's plugins/environments). The DDP strategy asks it for the rank,
// world size and rendezvous address; it never starts processes itself (that
// is plugins/launchers/subprocess_script.h).
//
// Chosen automatically by select_cluster_environment(), first match wins:
//   1. a worker of our own local spawn (LT_LOCAL_SPAWN=1 and RANK set)  -> LocalEnvironment
//   2. torchrun, or generic RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT vars -> TorchrunEnvironment
//   3. SLURM (SLURM_PROCID and SLURM_NTASKS, not an interactive shell)  -> SlurmEnvironment
//   4. Open MPI (OMPI_COMM_WORLD_*) or MPICH/Intel MPI (PMI_RANK/PMI_SIZE) -> MpiEnvironment
//   5. none of these: this process is the supervisor of a local spawn   -> LocalEnvironment

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <lightning_cpp/core/env.h>

namespace lt {

class ClusterEnvironment {
 public:
  virtual ~ClusterEnvironment() = default;
  virtual std::string name() const = 0;
  // True when something outside us (torchrun, srun, mpirun, our own
  // supervisor) started every rank: this process is a worker. False only
  // in the supervisor of a local spawn, which must start the workers.
  virtual bool creates_processes_externally() const = 0;
  std::string main_address() const { return ranks_.main_address; }
  int main_port() const { return ranks_.main_port; }
  int64_t world_size() const { return ranks_.world_size; }
  int64_t global_rank() const { return ranks_.global_rank; }
  int64_t local_rank() const { return ranks_.local_rank; }
  int64_t node_rank() const { return ranks_.node_rank; }
  // Processes on this node (local world size), when the environment says so.
  std::optional<int64_t> local_world_size() const { return ranks_.local_world_size; }
  // Set when the launcher already hosts the c10d store at main_address():
  // every rank connects as a client, under this key prefix (torchrun's
  // static rendezvous: TORCHELASTIC_USE_AGENT_STORE).
  const std::optional<std::string>& agent_store_prefix() const { return ranks_.agent_store_prefix; }

 protected:
  // Each environment's constructor fills this from its variables; the
  // defaults are a single process on this machine.
  struct Ranks {
    std::string main_address = "127.0.0.1";
    int main_port = 0;
    int64_t world_size = 1, global_rank = 0, local_rank = 0, node_rank = 0;
    std::optional<int64_t> local_world_size;
    std::optional<std::string> agent_store_prefix;
  };
  Ranks ranks_;
};

// Picks the environment of this process (order above).
std::unique_ptr<ClusterEnvironment> select_cluster_environment();

// The world size of the environment when something outside this process
// (torchrun, srun, mpirun) started more than one rank, else 1: a run with no
// strategy given then trains with ddp (as Lightning does).
int64_t external_world_size();

}  // namespace lt
