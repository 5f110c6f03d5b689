#include <lightning_cpp/plugins/launchers/subprocess_script.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/plugins/environments/local.h>
#include <lightning_cpp/plugins/launchers/error_file.h>

extern char** environ;

namespace lt {

namespace {

std::atomic<int> g_forward_signal{0};
std::atomic<int> g_signal_count{0};

void on_signal(int sig) {
  g_forward_signal.store(sig == SIGHUP ? SIGTERM : sig);  // a closed terminal stops the run like SIGTERM
  g_signal_count.fetch_add(1);
}

std::vector<std::string> merged_environment(const std::map<std::string, std::string>& extra) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  for (const auto& [k, v] : extra) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

pid_t spawn(const WorkerSpec& spec) {
  LT_INTERNAL_ASSERT(!spec.argv.empty(), "launch: a worker has an empty argv");
  // Everything the child needs is prepared before fork: after fork only
  // async-signal-safe calls are allowed in a multi-threaded parent.
  std::vector<std::string> env_strings = merged_environment(spec.env);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out_fd = -1;
  if (!spec.output_path.empty()) {
    out_fd = ::open(spec.output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    LT_CHECK(out_fd >= 0, "launch: cannot open worker log '", spec.output_path, "': ", std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  LT_CHECK(pid >= 0, "launch: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the supervisor died before prctl
    // A process group of its own: a terminal's Ctrl-C (SIGINT to the
    // foreground group) reaches the supervisor alone, which forwards it once;
    // a worker that got both would take the second as "exit now".
    ::setpgid(0, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGINT, &dfl, nullptr);
    ::sigaction(SIGTERM, &dfl, nullptr);
    ::sigaction(SIGHUP, &dfl, nullptr);
    if (out_fd >= 0) {
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(out_fd, STDERR_FILENO);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  if (out_fd >= 0) ::close(out_fd);
  return pid;
}

}  // namespace

std::string WorkerExit::describe() const {
  std::ostringstream os;
  if (timed_out) os << "timed out and was killed";
  else if (terminated) os << "was terminated after another worker failed";
  else if (signal != 0) os << "was killed by signal " << signal << " (" << ::strsignal(signal) << ")";
  else os << "exited with code " << exit_code;
  return os.str();
}

void install_forwarding_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGHUP, &sa, nullptr);
}

std::vector<WorkerExit> launch_and_wait(const std::vector<WorkerSpec>& workers, const LaunchOptions& options) {
  std::vector<pid_t> pids;
  std::vector<WorkerExit> exits(workers.size());
  std::vector<bool> running(workers.size(), false);
  for (const auto& spec : workers) {
    pids.push_back(spawn(spec));
    running[pids.size() - 1] = true;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  std::optional<Clock::time_point> kill_at;  // set once we started terminating
  size_t alive = workers.size();
  int forwarded_count = 0;
  auto terminate_all = [&](int sig) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (running[i]) ::kill(pids[i], sig);
    }
  };
  while (alive > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid || !running[i]) continue;
        running[i] = false;
        --alive;
        if (WIFEXITED(status)) exits[i].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) exits[i].signal = WTERMSIG(status);
        // A rank that stopped on request is not a failure: the others stop at the same step, one of them
        // may still be writing the checkpoint.
        if (!exits[i].ok() && !exits[i].stopped_on_request() && !kill_at && !exits[i].terminated) {
          for (size_t j = 0; j < pids.size(); ++j) exits[j].terminated = running[j];
          terminate_all(SIGTERM);
          kill_at = Clock::now() + options.grace;
        }
      }
      continue;
    }
    const int signals = g_signal_count.load();
    if (signals > forwarded_count) {
      // First signal: forward it (workers stop at a step boundary); second: kill.
      terminate_all(signals >= 2 ? SIGKILL : g_forward_signal.load());
      forwarded_count = signals;
      if (!kill_at) kill_at = Clock::now() + options.grace * 10;
    }
    const auto now = Clock::now();
    if (options.timeout.count() > 0 && now - start > options.timeout && !kill_at) {
      for (size_t i = 0; i < pids.size(); ++i) exits[i].timed_out = running[i];
      terminate_all(SIGTERM);
      kill_at = now + options.grace;
    }
    if (kill_at && now > *kill_at) terminate_all(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exits;
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  LT_CHECK(n > 0, "cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> self_argv() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> out;
  std::string arg;
  while (std::getline(in, arg, '\0')) out.push_back(arg);
  if (!out.empty()) out[0] = self_executable();
  return out;
}

int find_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  LT_CHECK(fd >= 0, "find_free_port: socket failed: ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  LT_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "find_free_port: bind failed: ",
           std::strerror(errno));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

void supervise_local_spawn(int64_t num_processes, const LocalSpawnOptions& options) {
  install_forwarding_signal_handlers();
  const bool one_node = options.num_nodes == 1;
  const int port = one_node ? find_free_port() : options.main_port;
  const std::vector<std::string> argv = self_argv();
  // Before the store's directory, so that a bad one leaves nothing behind.
  if (!options.worker_log_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.worker_log_dir, ec);
    LT_CHECK_VALUE(!ec, "local spawn: worker_log_dir '", options.worker_log_dir, "' cannot be created: ",
                   ec.message());
  }
  // A private directory for the workers' error files and, on one node, the
  // FileStore they rendezvous through.
  std::string store_dir = (std::filesystem::temp_directory_path() / "lightning-cpp-XXXXXX").string();
  LT_CHECK(::mkdtemp(store_dir.data()) != nullptr, "local spawn: cannot create a directory for the local store in ",
           std::filesystem::temp_directory_path().string(), ": ", std::strerror(errno));
  const auto error_file = [&](int64_t rank) { return store_dir + "/rank" + std::to_string(rank) + ".error.json"; };
  std::vector<WorkerSpec> workers;
  for (int64_t local = 0; local < num_processes; ++local) {
    const int64_t rank = options.node_rank * num_processes + local;
    WorkerSpec spec;
    spec.argv = argv;
    spec.env = {{LocalEnvironment::kWorkerVar, "1"},
                {"RANK", std::to_string(rank)},
                {"LOCAL_RANK", std::to_string(local)},
                {"WORLD_SIZE", std::to_string(num_processes * options.num_nodes)},
                {"LOCAL_WORLD_SIZE", std::to_string(num_processes)},
                {"NODE_RANK", std::to_string(options.node_rank)},
                {"MASTER_ADDR", one_node ? std::string("127.0.0.1") : options.main_address},
                {"MASTER_PORT", std::to_string(port)}};
    if (one_node) spec.env[LocalEnvironment::kStoreVar] = store_dir + "/store";
    spec.env[kErrorFileVar] = error_file(rank);
    // Workers on this terminal leave their errors to the summary below.
    if (options.worker_log_dir.empty()) spec.env[kLauncherPrintsErrorsVar] = "1";
    if (!options.worker_log_dir.empty()) {
      spec.output_path =
          (std::filesystem::path(options.worker_log_dir) / ("rank" + std::to_string(rank) + ".log")).string();
    }
    workers.push_back(std::move(spec));
  }
  // What this process printed before (buffered when piped) comes before the launch line.
  std::fflush(stdout);
  std::cout.flush();
  if (one_node) {
    std::fprintf(stderr, "%s: %s: launching %s (store %s/store)\n", program_name().c_str(), options.who.c_str(),
                 count_of(num_processes, "worker process").c_str(), store_dir.c_str());
  } else {
    std::fprintf(stderr, "%s: %s: node %lld of %lld: launching %s (store %s:%d)\n", program_name().c_str(),
                 options.who.c_str(),
                 static_cast<long long>(options.node_rank), static_cast<long long>(options.num_nodes),
                 count_of(num_processes, "worker process").c_str(), options.main_address.c_str(), port);
  }
  std::fflush(stderr);
  LaunchOptions launch;
  launch.timeout = options.timeout;
  const std::vector<WorkerExit> exits = launch_and_wait(workers, launch);
  const auto global_rank = [&](size_t local) {
    return options.node_rank * num_processes + static_cast<int64_t>(local);
  };
  std::map<size_t, std::string> failures;
  for (size_t local = 0; local < exits.size(); ++local) {
    if (auto message = read_error_file(error_file(global_rank(local)))) {
      failures[static_cast<size_t>(global_rank(local))] = *message;
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(store_dir, ignored);
  std::fputs(group_failures(failures).c_str(), stderr);

  // The root cause: the first worker that failed by itself (not one the
  // launcher terminated after it).
  int code = 0;
  for (size_t local = 0; local < exits.size() && code == 0; ++local) {
    const WorkerExit& e = exits[local];
    if (e.ok() || e.stopped_on_request() || e.terminated) continue;
    const auto rank = static_cast<long long>(global_rank(local));
    std::fprintf(stderr, "%s: %s: rank %lld of %lld %s", program_name().c_str(), options.who.c_str(), rank,
                 static_cast<long long>(num_processes * options.num_nodes), e.describe().c_str());
    if (!options.worker_log_dir.empty()) {
      std::fprintf(stderr, " (its output: %s/rank%lld.log)", options.worker_log_dir.c_str(), rank);
    }
    std::fprintf(stderr, "; the other workers were stopped\n");
    code = e.timed_out     ? 124
           : e.signal != 0 ? 128 + e.signal
                           : (e.exit_code > 0 && e.exit_code < 256 ? e.exit_code : 1);
  }
  // Exit 2 says nothing happened; if another rank failed after writing files
  // (its exit 1: the same input error found after rank 0 wrote config.yaml),
  // something did.
  for (const WorkerExit& e : exits) {
    if (code == 2 && e.signal == 0 && e.exit_code == 1) code = 1;
  }
  // Every rank that did not finish stopped on request: so did the run.
  if (code == 0 && std::any_of(exits.begin(), exits.end(), [](const WorkerExit& e) { return e.stopped_on_request(); })) {
    std::fprintf(stderr,
                 "%s: %s: stopped on request; rank 0's last lines name the checkpoint and how to resume (exit "
                 "code %d)\n",
                 program_name().c_str(), options.who.c_str(), kExitStoppedOnRequest);
    code = kExitStoppedOnRequest;
  }
  std::fflush(stderr);
  std::fflush(stdout);
  // The supervisor's work is done; the run happened in the workers.
  std::exit(code);
}

}  // namespace lt
