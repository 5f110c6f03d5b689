#pragma once
// Setting up a c10d process group from a cluster environment (Lightning's
// _init_dist_connection): the store, the backend, gloo's network device.
//
// The store: one rank needs none across processes (a HashStore); a local
// spawn's workers share a c10d::FileStore in the supervisor's private 0700
// directory (LT_LOCAL_STORE), so they listen on no socket but gloo's on
// 127.0.0.1 (LibTorch 1.13's TCPStore can only listen on every interface);
// otherwise rank 0 hosts a c10d::TCPStore at MASTER_ADDR:MASTER_PORT, or,
// when torchrun's agent hosts one there (ClusterEnvironment::
// agent_store_prefix), every rank connects to it as a client. Each
// group gets its own store prefix, so a second Trainer in the same workers
// gets a fresh rendezvous.
// Backends: gloo (CPU tensors; the default on CPU), nccl (only in builds with
// LibTorch's CUDA and the NCCL headers; the default on CUDA).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace lt {

class ClusterEnvironment;

// "gloo" or "nccl": `requested`, or the device's default when empty. Throws
// lt::ValueError, begun with `who` ("strategy ddp"), when it is neither, or
// nccl is not built in or not on CUDA.
std::string resolve_process_group_backend(const std::string& requested, c10::DeviceType device,
                                          const std::string& accelerator, const std::string& who);

struct DistributedConnection {
  c10::intrusive_ptr<c10d::Store> store;  // prefixed for this group
  c10::intrusive_ptr<c10d::ProcessGroup> process_group;
  std::string rendezvous;  // where the ranks met, for messages
  std::string backend;
  std::chrono::milliseconds timeout{0};
  bool hosts_store = false;  // this rank's exit takes the store with it (rank 0's TCPStore)
};

// Creates the store and the `backend` process group of the environment's
// ranks; every rendezvous and collective times out after `timeout`.
DistributedConnection init_process_group(const ClusterEnvironment& environment, const std::string& backend,
                                         std::chrono::milliseconds timeout);

// A further group of the same backend (PyTorch's new_group): of every rank
// when `ranks` is empty, else of those global ranks (this one among them; its
// rank in the group is its place in `ranks`). Its store is under `name` within
// the connection's, a name only these ranks use; each of them must create it.
c10::intrusive_ptr<c10d::ProcessGroup> new_process_group(const DistributedConnection& connection,
                                                         const ClusterEnvironment& environment,
                                                         const std::string& name,
                                                         const std::vector<int64_t>& ranks = {});

}  // namespace lt
