#pragma once
// Environment variables as the launchers set them (RANK, SLURM_PROCID, ...).

#include <cstdint>
#include <optional>
#include <string>

namespace lt {

namespace env {
// The variable's value, or nullopt when unset or empty.
std::optional<std::string> get(const char* name);
// The variable as an integer; throws lt::Error naming the variable and value when it is not one.
std::optional<int64_t> get_int(const char* name);
// Like get_int, but the variable must be set (the message names `environment`).
int64_t require_int(const char* name, const char* environment);
}  // namespace env

}  // namespace lt
