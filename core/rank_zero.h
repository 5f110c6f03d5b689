#pragma once
// The one channel for lightning-cpp's messages to the user: warnings
// (stderr, each text once per process) on every rank (warn) or on rank 0
// only (rank_zero_warn, Lightning's), and rank-zero info lines (stdout).
// The rank comes from the environment every launcher sets (RANK,
// SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK), so these work before any
// process group exists, and print in a single process and in the
// supervisor of a local spawn.
//
//   lt::rank_zero_info("launching ", n, " workers");

#include <cstdint>
#include <functional>
#include <string>

#include <c10/util/StringUtil.h>

namespace lt {

// This process's global rank as the environment tells it (0 when none does).
int64_t rank_zero_env_rank();

// The name the library's messages begin with: "<name>: ...", "<name>
// warning: ...". The running program's file name (a user's own program is
// named, not the library), unless set_program_name gave another; a program
// whose workers are spawned gets the same name in each.
std::string program_name();
void set_program_name(std::string name);

void rank_zero_info_message(const std::string& message);   // stdout, on rank 0
void warn_message(const std::string& message);             // each text once, to the handler

// Where warnings go: "<program_name()> warning: <text>" on stderr, unless a
// handler is set (a program's own logging, a test). Returns the previous one;
// an empty handler restores stderr.
using WarningHandler = std::function<void(const std::string& message)>;
WarningHandler set_warning_handler(WarningHandler handler);
// Where rank-zero info lines go: stdout unless a handler is set (the same
// contract as set_warning_handler).
WarningHandler set_info_handler(WarningHandler handler);

template <typename... Args>
void rank_zero_info(const Args&... args) {
  if (rank_zero_env_rank() == 0) rank_zero_info_message(c10::str(args...));
}

// On every rank; say which rank in the text where it matters.
template <typename... Args>
void warn(const Args&... args) {
  warn_message(c10::str(args...));
}

template <typename... Args>
void rank_zero_warn(const Args&... args) {
  if (rank_zero_env_rank() == 0) warn_message(c10::str(args...));
}

}  // namespace lt
