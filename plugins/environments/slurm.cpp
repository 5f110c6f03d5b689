#include <lightning_cpp/plugins/environments/slurm.h>

#include <lightning_cpp/core/check.h>

namespace lt {

bool SlurmEnvironment::detect() {
  if (!env::get("SLURM_NTASKS") || !env::get("SLURM_PROCID")) return false;
  const std::string job_name = env::get("SLURM_JOB_NAME").value_or("");
  return job_name != "bash" && job_name != "interactive";
}

std::string SlurmEnvironment::resolve_root_node_address(const std::string& nodelist) {
  // The first entry: up to the first ',' or ' ' outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (depth == 0 && (c == ',' || c == ' ')) break;
    if (c == '[') ++depth;
    if (c == ']') --depth;
    first += c;
  }
  const size_t open = first.find('[');
  if (open == std::string::npos) return first;
  // A range: the prefix and the first number of the range.
  std::string out = first.substr(0, open);
  for (size_t i = open + 1; i < first.size() && first[i] != '-' && first[i] != ',' && first[i] != ']'; ++i) {
    out += first[i];
  }
  return out;
}

SlurmEnvironment::SlurmEnvironment() {
  ranks_.global_rank = env::require_int("SLURM_PROCID", "SLURM");
  ranks_.world_size = env::require_int("SLURM_NTASKS", "SLURM");
  ranks_.local_rank = env::get_int("SLURM_LOCALID").value_or(0);
  ranks_.node_rank = env::get_int("SLURM_NODEID").value_or(0);
  ranks_.local_world_size = env::get_int("SLURM_NTASKS_PER_NODE");
  LT_CHECK(ranks_.global_rank >= 0 && ranks_.global_rank < ranks_.world_size, "SLURM: SLURM_PROCID=",
           ranks_.global_rank, " must be in [0, SLURM_NTASKS=", ranks_.world_size, ")");
  if (auto address = env::get("MASTER_ADDR")) {
    ranks_.main_address = *address;
  } else {
    auto nodes = env::get("SLURM_NODELIST");
    if (!nodes) nodes = env::get("SLURM_JOB_NODELIST");
    LT_CHECK(nodes.has_value() || ranks_.world_size == 1,
             "SLURM: neither MASTER_ADDR nor SLURM_NODELIST is set; cannot find the host of rank 0");
    ranks_.main_address = nodes ? resolve_root_node_address(*nodes) : "127.0.0.1";
  }
  if (auto port = env::get_int("MASTER_PORT")) {
    ranks_.main_port = static_cast<int>(*port);
  } else {
    const std::string job = env::get("SLURM_JOB_ID").value_or("0");
    const std::string tail = job.size() > 4 ? job.substr(job.size() - 4) : job;
    int digits = 0;
    for (char c : tail) digits = c >= '0' && c <= '9' ? digits * 10 + (c - '0') : digits;
    ranks_.main_port = 15000 + digits;
  }
}

}  // namespace lt
