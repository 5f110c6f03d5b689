#pragma once
// seed_everything, for the Trainer and Fabric alike (Lightning's
// lightning.fabric.utilities.seed).

#include <cstdint>

#include <torch/torch.h>

namespace lt {

// Seeds torch's global generator (the CPU's, and CUDA's where there is one).
inline void seed_everything(uint64_t seed) { torch::manual_seed(seed); }

}  // namespace lt
