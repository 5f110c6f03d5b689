#pragma once
// MpiEnvironment: ranks started by mpirun/mpiexec. Open MPI sets
// OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; MPICH and Intel MPI
// (Hydra) set PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS. MPI is
// not used for communication, only to learn the ranks: the rendezvous is
// MASTER_ADDR/MASTER_PORT (`mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500`).
// When every rank is on this node they default to 127.0.0.1 and a port
// derived from the MPI job id (29500 if there is none).

#include <lightning_cpp/plugins/environments/cluster_environment.h>

namespace lt {

class MpiEnvironment : public ClusterEnvironment {
 public:
  static bool detect();

  MpiEnvironment();
  std::string name() const override { return flavor_; }
  bool creates_processes_externally() const override { return true; }

 private:
  std::string flavor_;  // "openmpi" or "mpich"
};

}  // namespace lt
