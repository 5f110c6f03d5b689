#pragma once
// Lightning's utilities.grad_norm: the gradients' norms, to log, true under
// every strategy.
//
//   void on_before_optimizer_step(torch::optim::Optimizer&) override {
//     for (const auto& [name, norm] : lt::grad_norm(*this, 2.0)) log(name, norm);
//   }
//
// "grad_2.0_norm/<parameter>" for each of the module's parameters that holds
// a gradient on this rank (under ddp every one; under fsdp none: the
// gradients live in the optimizer's flat shards), and "grad_2.0_norm_total":
// the norm of all the gradients the optimizer steps with, over every rank's
// part (Strategy::gradient_norm: a collective under fsdp, so every rank calls
// it at the same point; under uneven inputs with Join, from a hook a joined
// rank runs too, as on_after_optimizer_step, or it is refused naming it).

#include <map>
#include <string>

#include <lightning_cpp/core/lightning_module.h>

namespace lt {

// norm_type: p > 0, or infinity ("grad_inf_norm..."), named as Python
// prints the float.
std::map<std::string, double> grad_norm(LightningModule& module, double norm_type = 2.0,
                                        const std::string& group_separator = "/");

}  // namespace lt
