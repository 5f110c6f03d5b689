#pragma once
// What a process that is one rank of several sets for itself, however it was
// started (a local spawn, torchrun, srun, mpirun).

#include <cstdint>

namespace lt {

// - Lightning's _set_num_threads_if_needed: where OMP_NUM_THREADS is not set,
//   each of a node's `local_ranks` takes at most its share of the CPUs this
//   process may run on (LibTorch's default is one thread per core in every
//   rank), never more threads than LibTorch's default.
// - SIGPIPE ignored: a peer that died makes gloo's next send hit a closed
//   socket; that is an EPIPE error the collective watchdog reports, not a
//   SIGPIPE that kills this rank silently (Python, so PyTorch's DDP, ignores
//   SIGPIPE too).
// - stdout line-buffered: a rank's stdout is a pipe or a file, so what it
//   printed is not lost with its buffer when it is killed, and its lines
//   interleave whole with the other ranks'.
void configure_worker_process(int64_t local_ranks);

}  // namespace lt
