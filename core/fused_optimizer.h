#pragma once
// Optimizer steps in one pass over memory (issue 30). LibTorch's SGD, Adam and
// AdamW step each parameter with 6 to 10 tensor operations, each a pass over
// the parameter's size with its own temporaries: for the example's model a
// sizeable part of its step (docs/benchmarks.md). step_optimizer does the same
// arithmetic element by element in one pass (parameter, gradient and state
// read once, written once), split over the intra-op threads as ATen splits.
//
// Bitwise equal to optimizer.step(): each element gets the float operations
// ATen's kernels apply, in their order and rounding. ATen's CPU kernels fuse
// a + alpha * b (add with alpha, addcmul) into one rounding where they run
// their AVX2 or AVX-512 code and round twice in their default code; which one
// this process's ATen does is measured once on a small probe, and where
// neither matches the optimizer steps as it always did. The state is the
// optimizer's own (optimizer.state(), created as LibTorch creates it), so
// checkpoints, optimizer_state_dict and a later optimizer.step() see no
// difference. Tested against optimizer.step() bitwise in
// tests/core/fused_optimizer_test.cpp.

namespace torch::optim {
class Optimizer;
}

namespace lt {

// Steps `optimizer` exactly as optimizer.step() would: SGD, Adam and AdamW
// (exactly those classes, not subclasses) over float32, contiguous CPU
// parameters and gradients in one fused pass per parameter; anything else (an
// optimizer of another class, another dtype or device, a sparse gradient) by
// optimizer.step().
void step_optimizer(torch::optim::Optimizer& optimizer);

// Whether step_optimizer(optimizer) would take the fused pass now.
bool steps_fused(torch::optim::Optimizer& optimizer);

}  // namespace lt
