#include <lightning_cpp/plugins/environments/mpi.h>

#include <algorithm>
#include <functional>

#include <lightning_cpp/core/check.h>

namespace lt {

bool MpiEnvironment::detect() {
  return (env::get("OMPI_COMM_WORLD_SIZE") && env::get("OMPI_COMM_WORLD_RANK")) ||
         (env::get("PMI_SIZE") && env::get("PMI_RANK"));
}

MpiEnvironment::MpiEnvironment() {
  if (env::get("OMPI_COMM_WORLD_SIZE")) {
    flavor_ = "openmpi";
    ranks_.world_size = env::require_int("OMPI_COMM_WORLD_SIZE", "Open MPI");
    ranks_.global_rank = env::require_int("OMPI_COMM_WORLD_RANK", "Open MPI");
    ranks_.local_rank = env::get_int("OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    ranks_.local_world_size = env::get_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    ranks_.node_rank =
        env::get_int("OMPI_COMM_WORLD_NODE_RANK")
            .value_or(ranks_.local_world_size
                          ? ranks_.global_rank / std::max<int64_t>(*ranks_.local_world_size, 1)
                          : 0);
  } else {
    flavor_ = "mpich";
    ranks_.world_size = env::require_int("PMI_SIZE", "MPICH");
    ranks_.global_rank = env::require_int("PMI_RANK", "MPICH");
    ranks_.local_rank = env::get_int("MPI_LOCALRANKID").value_or(0);
    ranks_.local_world_size = env::get_int("MPI_LOCALNRANKS");
    ranks_.node_rank =
        ranks_.local_world_size ? ranks_.global_rank / std::max<int64_t>(*ranks_.local_world_size, 1) : 0;
  }
  LT_CHECK(ranks_.global_rank >= 0 && ranks_.global_rank < ranks_.world_size, flavor_, ": rank ", ranks_.global_rank,
           " must be in [0, ", ranks_.world_size, ")");
  const bool single_node = ranks_.local_world_size == ranks_.world_size || ranks_.world_size == 1;
  auto address = env::get("MASTER_ADDR");
  LT_CHECK(address.has_value() || single_node, flavor_, ": ranks span several nodes but MASTER_ADDR is not set; ",
           "export MASTER_ADDR=<host of rank 0> and MASTER_PORT=<free port> to every rank (mpirun -x ...)");
  ranks_.main_address = address.value_or("127.0.0.1");
  if (auto port = env::get_int("MASTER_PORT")) {
    ranks_.main_port = static_cast<int>(*port);
  } else {
    LT_CHECK(single_node, flavor_, ": ranks span several nodes but MASTER_PORT is not set");
    // Every rank of one job sees the same job id, so they agree on the port
    // without communicating; two jobs on one node get different ports.
    auto job = env::get("OMPI_MCA_ess_base_jobid");
    if (!job) job = env::get("PMIX_NAMESPACE");
    if (!job) job = env::get("PMI_KVSNAME");
    ranks_.main_port = job ? 20000 + static_cast<int>(std::hash<std::string>{}(*job) % 10000) : 29500;
  }
}

}  // namespace lt
