#include <lightning_cpp/plugins/distributed/process_group.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

// ProcessGroupGloo.hpp declares nothing unless USE_C10D_GLOO is defined (as
// LibTorch's own build does); gloo's headers come with LibTorch (or libgloo-dev).
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#if defined(LT_WITH_NCCL) && LT_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/env.h>
#include <lightning_cpp/core/torch_compat.h>
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/environments/local.h>

namespace lt {

namespace {

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// The local IPv4 address this host uses to reach `host` (a UDP "connect"
// sends nothing; it only selects the route). Empty when it cannot tell.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port > 0 ? port : 9).c_str(), &hints, &result) != 0) return {};
  std::string out;
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && result != nullptr && ::connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) {
      out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(result);
  return out;
}

// The interfaces of this host with an IPv4 address, in order.
std::vector<std::string> interface_names() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
        std::find(out.begin(), out.end(), i->ifa_name) == out.end()) {
      out.emplace_back(i->ifa_name);
    }
  }
  ::freeifaddrs(list);
  return out;
}

// Gloo's transport device: GLOO_SOCKET_IFNAME if set (as in PyTorch); the
// loopback device for a loopback MASTER_ADDR (a one-node local spawn's); otherwise the
// address of the interface that routes to MASTER_ADDR, so multi-node runs
// work without naming an interface.
std::shared_ptr<::gloo::transport::Device> gloo_device(const ClusterEnvironment& environment) {
  if (auto ifname = env::get("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname->substr(0, ifname->find(',')));
  }
  if (is_loopback(environment.main_address())) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  const std::string local = local_address_towards(environment.main_address(), environment.main_port());
  if (!local.empty()) return c10d::ProcessGroupGloo::createDeviceForHostname(local);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// GLOO_SOCKET_IFNAME names an interface of this host: checked on every rank
// before the rendezvous, so that no rank waits for one that refused it.
void check_gloo_interface() {
  const auto ifname = env::get("GLOO_SOCKET_IFNAME");
  if (!ifname) return;
  const std::string first = ifname->substr(0, ifname->find(','));
  const std::vector<std::string> names = interface_names();
  std::string listing;
  for (const auto& name : names) listing += (listing.empty() ? "" : ", ") + name;
  LT_CHECK_VALUE(std::find(names.begin(), names.end(), first) != names.end(), "GLOO_SOCKET_IFNAME=", *ifname,
                 ": this host has no interface '", first, "' with an IPv4 address; it has: ", listing,
                 " (unset it to use the interface that routes to MASTER_ADDR)");
}

// Distinct store prefixes for the process groups one process creates, so a
// second Trainer in the same workers (same MASTER_PORT) gets a fresh rendezvous.
std::atomic<int> g_process_group_count{0};

// The group's members are `world_size` ranks, this one `rank` among them.
c10::intrusive_ptr<c10d::ProcessGroup> make_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const ClusterEnvironment& environment, const std::string& backend,
                                                    std::chrono::milliseconds timeout, int rank, int world_size) {
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  if (backend == "gloo") {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    gloo_options->devices.push_back(gloo_device(environment));
    gloo_options->threads = 2;  // PyTorch: 2 per device
    group = compat::process_group_of(c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, gloo_options),
                                     store, rank, world_size, false);
  } else {
#if defined(LT_WITH_NCCL) && LT_WITH_NCCL
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = timeout;
    group = compat::process_group_of(c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, nccl_options),
                                     store, rank, world_size, true);
#endif
  }
  LT_INTERNAL_ASSERT(group, "no process group for backend '", backend, "'");
  return group;
}

}  // namespace

std::string resolve_process_group_backend(const std::string& requested, c10::DeviceType device,
                                          const std::string& accelerator, const std::string& who) {
  const bool cuda = device == c10::DeviceType::CUDA;
  const std::string backend = requested.empty() ? (cuda ? "nccl" : "gloo") : requested;
  LT_CHECK_VALUE(backend == "gloo" || backend == "nccl",
                 who, ": process_group_backend must be gloo or nccl, got '", backend, "'");
  if (backend == "nccl") {
#if !(defined(LT_WITH_NCCL) && LT_WITH_NCCL)
    LT_CHECK_VALUE(false, who,
                   ": process_group_backend nccl is not available in this build (LibTorch without CUDA, "
                   "or no NCCL headers when lightning-cpp was built); use gloo with accelerator cpu, or rebuild "
                   "against a CUDA LibTorch with NCCL");
#endif
    LT_CHECK_VALUE(cuda, who, ": process_group_backend nccl needs accelerator cuda, got accelerator '",
                   accelerator, "'");
  }
  return backend;
}

DistributedConnection init_process_group(const ClusterEnvironment& environment, const std::string& backend,
                                         std::chrono::milliseconds timeout) {
  const int64_t rank = environment.global_rank(), world_size = environment.world_size();
  if (backend == "gloo") check_gloo_interface();
  const int index = g_process_group_count.fetch_add(1);
  DistributedConnection out;
  c10::intrusive_ptr<c10d::Store> base;
  const auto local_store = env::get(LocalEnvironment::kStoreVar);
  out.rendezvous = c10::str(environment.main_address(), ":", environment.main_port());
  if (world_size == 1) {
    base = c10::make_intrusive<c10d::HashStore>();
  } else if (environment.name() == "local" && local_store) {
    base = c10::make_intrusive<c10d::FileStore>(*local_store, -1);  // -1: the supervisor removes it
    base->setTimeout(timeout);
    out.rendezvous = *local_store;
  } else {
    const auto& agent_prefix = environment.agent_store_prefix();
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(environment.main_port());
    store_options.isServer = rank == 0 && !agent_prefix;
    store_options.numWorkers = static_cast<size_t>(world_size);
    store_options.waitWorkers = index == 0;  // later groups reuse the server every rank already joined
    store_options.timeout = timeout;
    store_options.multiTenant = true;  // a second Trainer in this process reuses the server
    try {
      base = c10::make_intrusive<c10d::TCPStore>(environment.main_address(), store_options);
    } catch (const std::exception& e) {
      // c10d's socket timeout says neither who waited nor for whom.
      const std::string where = c10::str(environment.main_address(), ":", environment.main_port());
      throw Error(c10::str(
          "rendezvous: rank ", rank, " of ", world_size, " (", environment.name(), " environment) ",
          store_options.isServer ? c10::str("hosts the store at ", where, " and waited ", timeout.count() / 1000.0,
                                            " s for the other ", world_size - 1, " rank(s) to join")
                                 : c10::str("waited ", timeout.count() / 1000.0, " s for the store at ", where,
                                            " that rank 0 hosts"),
          ": ", error_message(e).substr(0, 200),
          ". Are the other ranks running, with the same MASTER_ADDR and MASTER_PORT? A RANK, WORLD_SIZE or ",
          "MASTER_* left in the environment by an earlier launch makes a plain run wait for peers that never come"));
    }
    if (agent_prefix) base = c10::make_intrusive<c10d::PrefixStore>(*agent_prefix, base);
    out.hosts_store = store_options.isServer;
  }
  out.store = c10::make_intrusive<c10d::PrefixStore>("lt_pg_" + std::to_string(index), base);
  out.process_group = make_backend(out.store, environment, backend, timeout, static_cast<int>(rank),
                                   static_cast<int>(world_size));
  out.backend = backend;
  out.timeout = timeout;
  return out;
}

c10::intrusive_ptr<c10d::ProcessGroup> new_process_group(const DistributedConnection& connection,
                                                         const ClusterEnvironment& environment,
                                                         const std::string& name, const std::vector<int64_t>& ranks) {
  auto store = c10::make_intrusive<c10d::PrefixStore>(name, connection.store);
  if (ranks.empty()) {
    return make_backend(store, environment, connection.backend, connection.timeout,
                        static_cast<int>(environment.global_rank()), static_cast<int>(environment.world_size()));
  }
  const auto me = std::find(ranks.begin(), ranks.end(), environment.global_rank());
  LT_INTERNAL_ASSERT(me != ranks.end(), "new_process_group '", name, "': rank ", environment.global_rank(),
                     " is not one of its ranks");
  return make_backend(store, environment, connection.backend, connection.timeout,
                      static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()));
}

}  // namespace lt
