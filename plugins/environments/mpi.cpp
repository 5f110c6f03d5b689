#include "plugins/environments/mpi.h"

#include <algorithm>
#include <functional>

#include "trainer/check.h"

namespace lt {

bool MpiEnvironment::detect() {
  return (env::get("OMPI_COMM_WORLD_SIZE") && env::get("OMPI_COMM_WORLD_RANK")) ||
         (env::get("PMI_SIZE") && env::get("PMI_RANK"));
}

MpiEnvironment::MpiEnvironment() {
  if (env::get("OMPI_COMM_WORLD_SIZE")) {
    flavor_ = "openmpi";
    world_size_ = env::require_int("OMPI_COMM_WORLD_SIZE", "Open MPI");
    rank_ = env::require_int("OMPI_COMM_WORLD_RANK", "Open MPI");
    local_rank_ = env::get_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    local_world_size_ = env::get_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    node_rank_ = env::get_int("OMPI_COMM_WORLD_NODE_RANK")
                     .value_or(local_world_size_ ? rank_ / std::max<int64_t>(*local_world_size_, 1) : 0);
  } else {
    flavor_ = "mpich";
    world_size_ = env::require_int("PMI_SIZE", "MPICH");
    rank_ = env::require_int("PMI_RANK", "MPICH");
    local_rank_ = env::get_int("MPI_LOCALRANKID").value_or(0);
    local_world_size_ = env::get_int("MPI_LOCALNRANKS");
    node_rank_ = local_world_size_ ? rank_ / std::max<int64_t>(*local_world_size_, 1) : 0;
  }
  LT_CHECK(rank_ >= 0 && rank_ < world_size_, flavor_, ": rank ", rank_, " must be in [0, ", world_size_, ")");
  const bool single_node = local_world_size_ == world_size_ || world_size_ == 1;
  auto address = env::get("MASTER_ADDR");
  LT_CHECK(address.has_value() || single_node, flavor_, ": ranks span several nodes but MASTER_ADDR is not set; ",
           "export MASTER_ADDR=<host of rank 0> and MASTER_PORT=<free port> to every rank (mpirun -x ...)");
  address_ = address.value_or("127.0.0.1");
  if (auto port = env::get_int("MASTER_PORT")) {
    port_ = static_cast<int>(*port);
  } else {
    LT_CHECK(single_node, flavor_, ": ranks span several nodes but MASTER_PORT is not set");
    // Every rank of one job sees the same job id, so they agree on the port
    // without communicating; two jobs on one node get different ports.
    auto job = env::get("OMPI_MCA_ess_base_jobid");
    if (!job) job = env::get("PMIX_NAMESPACE");
    if (!job) job = env::get("PMI_KVSNAME");
    port_ = job ? 20000 + static_cast<int>(std::hash<std::string>{}(*job) % 10000) : 29500;
  }
}

}  // namespace lt
