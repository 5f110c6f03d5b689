#include <lightning_cpp/plugins/environments/cluster_environment.h>

#include <cstdlib>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/environments/local.h>
#include <lightning_cpp/plugins/environments/mpi.h>
#include <lightning_cpp/plugins/environments/slurm.h>
#include <lightning_cpp/plugins/environments/torchrun.h>

namespace lt {

std::unique_ptr<ClusterEnvironment> select_cluster_environment() {
  if (LocalEnvironment::detect_worker()) return std::make_unique<LocalEnvironment>();
  if (TorchrunEnvironment::detect()) return std::make_unique<TorchrunEnvironment>();
  if (SlurmEnvironment::detect()) return std::make_unique<SlurmEnvironment>();
  if (MpiEnvironment::detect()) return std::make_unique<MpiEnvironment>();
  return std::make_unique<LocalEnvironment>();
}

int64_t external_world_size() {
  const auto environment = select_cluster_environment();
  return environment->creates_processes_externally() ? environment->world_size() : 1;
}

}  // namespace lt
