// ClusterEnvironment: which environment each set of launcher variables
// selects, and the ranks and rendezvous it reads from them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/environments/local.h>
#include <lightning_cpp/plugins/environments/mpi.h>
#include <lightning_cpp/plugins/environments/slurm.h>
#include <lightning_cpp/plugins/environments/torchrun.h>

namespace {

// Sets environment variables for one scope and restores them after, so
// nothing leaks into the worker processes other tests start.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Every variable any environment looks at, unset.
std::map<std::string, std::optional<std::string>> clean_env() {
  std::map<std::string, std::optional<std::string>> vars;
  for (const char* k : {"LT_LOCAL_SPAWN", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS",
                        "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
                        "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "OMPI_COMM_WORLD_NODE_RANK", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME",
                        "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}) {
    vars[k] = std::nullopt;
  }
  return vars;
}

std::map<std::string, std::optional<std::string>> with(std::map<std::string, std::optional<std::string>> base,
                                                       const std::map<std::string, std::string>& set) {
  for (const auto& [k, v] : set) base[k] = v;
  return base;
}

}  // namespace

TEST(ClusterEnvironment, NoVariablesMeansALocalSpawnSupervisor) {
  ScopedEnv env(clean_env());
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "local");
  EXPECT_FALSE(e->creates_processes_externally());
}

TEST(ClusterEnvironment, LocalSpawnWorker) {
  ScopedEnv env(with(clean_env(), {{"LT_LOCAL_SPAWN", "1"}, {"RANK", "2"}, {"WORLD_SIZE", "3"},
                                   {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}}));
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "local");
  EXPECT_TRUE(e->creates_processes_externally());
  EXPECT_EQ(e->global_rank(), 2);
  EXPECT_EQ(e->world_size(), 3);
  EXPECT_EQ(e->main_port(), 1234);
}

TEST(ClusterEnvironment, TorchrunVariables) {
  ScopedEnv env(with(clean_env(), {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                                   {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                   {"TORCHELASTIC_RUN_ID", "x"}}));
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "torchrun");
  EXPECT_EQ(e->global_rank(), 5);
  EXPECT_EQ(e->world_size(), 8);
  EXPECT_EQ(e->local_rank(), 1);
  EXPECT_EQ(e->node_rank(), 1);
  EXPECT_EQ(e->main_address(), "10.0.0.1");
  EXPECT_EQ(e->main_port(), 29500);
}

TEST(ClusterEnvironment, GenericVariablesNeedARendezvous) {
  ScopedEnv env(with(clean_env(), {{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  try {
    lt::select_cluster_environment();
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
}

TEST(ClusterEnvironment, Slurm) {
  ScopedEnv env(with(clean_env(), {{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "3"},
                                   {"SLURM_NODEID", "0"}, {"SLURM_NODELIST", "gpu[017-018,020],cpu1"},
                                   {"SLURM_JOB_ID", "123456789"}, {"SLURM_JOB_NAME", "train"}}));
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "slurm");
  EXPECT_EQ(e->global_rank(), 3);
  EXPECT_EQ(e->world_size(), 8);
  EXPECT_EQ(e->main_address(), "gpu017");
  EXPECT_EQ(e->main_port(), 15000 + 6789);
}

TEST(ClusterEnvironment, SlurmInteractiveShellIsNotALaunch) {
  ScopedEnv env(with(clean_env(), {{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_NAME", "bash"}}));
  EXPECT_EQ(lt::select_cluster_environment()->name(), "local");
}

TEST(ClusterEnvironment, SlurmNodelistForms) {
  using lt::SlurmEnvironment;
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("host1"), "host1");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("host1,host2"), "host1");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("node[7]"), "node7");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("node[003-005,9],gpu1"), "node003");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("a[1,2]"), "a1");
}

TEST(ClusterEnvironment, OpenMpiAndMpich) {
  {
    ScopedEnv env(with(clean_env(), {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
    auto e = lt::select_cluster_environment();
    EXPECT_EQ(e->name(), "openmpi");
    EXPECT_EQ(e->global_rank(), 2);
    EXPECT_EQ(e->local_rank(), 2);
    EXPECT_EQ(e->main_address(), "127.0.0.1");  // single node: loopback
    EXPECT_GT(e->main_port(), 0);
  }
  {
    ScopedEnv env(with(clean_env(), {{"PMI_SIZE", "4"}, {"PMI_RANK", "1"}, {"MPI_LOCALNRANKS", "2"},
                                     {"MPI_LOCALRANKID", "1"}}));
    try {
      lt::select_cluster_environment();
      FAIL() << "two nodes without MASTER_ADDR must be refused";
    } catch (const lt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
    }
  }
  {
    ScopedEnv env(with(clean_env(), {{"PMI_SIZE", "4"}, {"PMI_RANK", "3"}, {"MPI_LOCALNRANKS", "2"},
                                     {"MPI_LOCALRANKID", "1"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "2222"}}));
    auto e = lt::select_cluster_environment();
    EXPECT_EQ(e->name(), "mpich");
    EXPECT_EQ(e->node_rank(), 1);
    EXPECT_EQ(e->main_address(), "n0");
  }
}

namespace {

// Lightning's manual multi-node, read by the supervisor of a local spawn.
std::string nodes_error(int64_t num_nodes) {
  try {
    lt::LocalEnvironment().nodes(num_nodes, "strategy ddp");
  } catch (const lt::ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LocalEnvironment, OneNodeNeedsNoVariables) {
  ScopedEnv env(clean_env());
  const lt::LocalEnvironment::Nodes nodes = lt::LocalEnvironment().nodes(1, "strategy ddp");
  EXPECT_EQ(nodes.num_nodes, 1);
  EXPECT_EQ(nodes.node_rank, 0);
}

TEST(LocalEnvironment, SeveralNodesReadNodeZerosAddressAndThisNodesRank) {
  auto vars = clean_env();
  vars["MASTER_ADDR"] = "10.0.0.1";
  vars["MASTER_PORT"] = "29501";
  vars["NODE_RANK"] = "1";
  ScopedEnv env(vars);
  const lt::LocalEnvironment::Nodes nodes = lt::LocalEnvironment().nodes(2, "strategy ddp");
  EXPECT_EQ(nodes.num_nodes, 2);
  EXPECT_EQ(nodes.node_rank, 1);
  EXPECT_EQ(nodes.main_address, "10.0.0.1");
  EXPECT_EQ(nodes.main_port, 29501);
}

TEST(LocalEnvironment, SeveralNodesNameTheMissingVariables) {
  auto vars = clean_env();
  vars["MASTER_PORT"] = "29501";
  ScopedEnv env(vars);
  const std::string what = nodes_error(2);
  EXPECT_NE(what.find("strategy ddp: num_nodes=2 needs ranks started by a cluster launcher"), std::string::npos)
      << what;
  EXPECT_NE(what.find("missing: MASTER_ADDR NODE_RANK"), std::string::npos) << what;
}

TEST(LocalEnvironment, ANodeRankOutsideTheNodesIsRefused) {
  auto vars = clean_env();
  vars["MASTER_ADDR"] = "10.0.0.1";
  vars["MASTER_PORT"] = "29501";
  vars["NODE_RANK"] = "2";
  ScopedEnv env(vars);
  const std::string what = nodes_error(2);
  EXPECT_NE(what.find("NODE_RANK=2 must be in [0, num_nodes=2)"), std::string::npos) << what;
}
