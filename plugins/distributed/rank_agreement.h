#pragma once
// Before a run's first step the ranks check that they run the same thing: the
// options that shape their sequence of collectives, the model's parameters
// and buffers (names, shapes, dtypes), the library's and LibTorch's versions.
// A mismatch would otherwise surface as a hang until the process group's
// timeout, or as wrong results. One allreduce of a hash of every rank's
// values where they agree; where not, every rank's values are gathered and
// each rank throws the same lt::ValueError naming each value that differs,
// its values and the ranks that hold each.
//
//   check_ranks_agree(strategy, values);   // every rank at once, through the strategy's collectives

#include <string>
#include <vector>

#include <torch/nn/module.h>

#include <lightning_cpp/core/options_table.h>

namespace lt {

class Strategy;

// This process's versions: lightning-cpp's and the LibTorch it was built with.
OptionValues version_values();
// The module's parameters and buffers: "model.<name>" -> "[4, 2] Float".
OptionValues module_values(const torch::nn::Module& module);
// "" when the ranks' values (by rank) agree; else what differs, by name and rank.
std::string describe_disagreement(const std::vector<OptionValues>& per_rank);
// Throws lt::ValueError on every rank when the ranks' `values` differ.
void check_ranks_agree(Strategy& strategy, const OptionValues& values);

}  // namespace lt
