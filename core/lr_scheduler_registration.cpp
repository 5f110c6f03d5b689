// The built-in learning-rate schedulers as YAML names them (LightningCLI's
// lr_scheduler: {class_path, init_args}): PyTorch's arguments, and how the
// loop steps them (interval, frequency), and a linear warm-up before any but
// ReduceLROnPlateau (warmup_iters, warmup_start_factor).
#include <lightning_cpp/core/lr_scheduler.h>

#include <string>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/registry.h>

namespace lt {

namespace {

using Make = std::function<std::shared_ptr<LRScheduler>(torch::optim::Optimizer&)>;

ArgSchema& add_stepping(ArgSchema& schema, const char* interval, bool warmup) {
  schema.add_string("interval", std::string(interval), "step it after each optimizer step or each epoch",
                    {"epoch", "step"});
  schema.add_int("frequency", 1, "step it every n intervals");
  if (warmup) {
    schema.add_int("warmup_iters", 0, "first raise the rate linearly over this many steps (0: none)");
    schema.add_float("warmup_start_factor", 0.001, "the warm-up's first rate, a share of the base rate");
  }
  return schema;
}

std::shared_ptr<LRSchedulerSpec> spec_of(const InitArgs& args, Make make) {
  auto spec = std::make_shared<LRSchedulerSpec>();
  spec->interval = args.get_string("interval") == "step" ? Interval::kStep : Interval::kEpoch;
  spec->frequency = args.get_int("frequency");
  LT_CHECK_VALUE(spec->frequency >= 1, args.where(), ".frequency must be >= 1, got ", spec->frequency);
  const int64_t warmup = args.has("warmup_iters") ? args.get_int("warmup_iters") : 0;
  LT_CHECK_VALUE(warmup >= 0, args.where(), ".warmup_iters must be >= 0, got ", warmup);
  if (warmup == 0) {
    spec->make = std::move(make);
    return spec;
  }
  const double start = args.get_float("warmup_start_factor");
  LT_CHECK_VALUE(start > 0.0 && start <= 1.0, args.where(), ".warmup_start_factor must be in (0, 1], got ", start);
  spec->make = [make = std::move(make), warmup, start](torch::optim::Optimizer& o) -> std::shared_ptr<LRScheduler> {
    auto ramp = std::make_shared<LinearLR>(o, start, 1.0, warmup);
    auto then = make(o);
    return std::make_shared<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{ramp, then},
                                          std::vector<int64_t>{warmup});
  };
  return spec;
}

// A YAML list of integers (milestones), read from its strings.
std::vector<int64_t> int_list(const InitArgs& args, const char* name) {
  std::vector<int64_t> out;
  for (const std::string& item : args.get_string_list(name)) {
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    LT_CHECK_VALUE(used == item.size() && !item.empty(), args.where(), ".", name, ": '", item,
                   "' is not an integer (a list of step or epoch counts)");
    out.push_back(value);
  }
  return out;
}

}  // namespace

void register_builtin_lr_schedulers(Registry& r) {
  r.add<LRSchedulerSpec>(
      "StepLR", "the rate times gamma every step_size intervals",
      add_stepping(ArgSchema().add_required("step_size", ArgType::kInt, "intervals between decays")
                       .add_float("gamma", 0.1, "the decay factor"),
                   "epoch", true),
      [](const InitArgs& a) {
        const int64_t step_size = a.get_int("step_size");
        const double gamma = a.get_float("gamma");
        return spec_of(a, [=](torch::optim::Optimizer& o) { return std::make_shared<StepLR>(o, step_size, gamma); });
      });
  r.add<LRSchedulerSpec>(
      "MultiStepLR", "the rate times gamma at each milestone",
      add_stepping(ArgSchema().add_string_list("milestones", {}, "the intervals at which to decay, e.g. [30, 80]")
                       .add_float("gamma", 0.1, "the decay factor"),
                   "epoch", true),
      [](const InitArgs& a) {
        const std::vector<int64_t> milestones = int_list(a, "milestones");
        const double gamma = a.get_float("gamma");
        return spec_of(a, [=](torch::optim::Optimizer& o) {
          return std::make_shared<MultiStepLR>(o, milestones, gamma);
        });
      });
  r.add<LRSchedulerSpec>(
      "ExponentialLR", "the rate times gamma every interval",
      add_stepping(ArgSchema().add_required("gamma", ArgType::kFloat, "the decay factor"), "epoch", true),
      [](const InitArgs& a) {
        const double gamma = a.get_float("gamma");
        return spec_of(a, [=](torch::optim::Optimizer& o) { return std::make_shared<ExponentialLR>(o, gamma); });
      });
  r.add<LRSchedulerSpec>(
      "LinearLR", "from start_factor to end_factor of the rate over total_iters intervals",
      add_stepping(ArgSchema()
                       .add_float("start_factor", 1.0 / 3, "the first rate, a share of the base rate")
                       .add_float("end_factor", 1.0, "the last rate, a share of the base rate")
                       .add_int("total_iters", 5, "intervals to get there"),
                   "epoch", false),
      [](const InitArgs& a) {
        const double start = a.get_float("start_factor"), end = a.get_float("end_factor");
        const int64_t total = a.get_int("total_iters");
        return spec_of(a, [=](torch::optim::Optimizer& o) { return std::make_shared<LinearLR>(o, start, end, total); });
      });
  r.add<LRSchedulerSpec>(
      "CosineAnnealingLR", "half a cosine from the rate to eta_min over T_max intervals",
      add_stepping(ArgSchema().add_required("T_max", ArgType::kInt, "intervals to eta_min")
                       .add_float("eta_min", 0.0, "the lowest rate"),
                   "epoch", true),
      [](const InitArgs& a) {
        const int64_t t_max = a.get_int("T_max");
        const double eta_min = a.get_float("eta_min");
        return spec_of(a, [=](torch::optim::Optimizer& o) {
          return std::make_shared<CosineAnnealingLR>(o, t_max, eta_min);
        });
      });
  r.add<LRSchedulerSpec>(
      "CosineAnnealingWarmRestarts", "cosines to eta_min, restarted, each T_mult times longer (SGDR)",
      add_stepping(ArgSchema()
                       .add_required("T_0", ArgType::kInt, "intervals of the first cosine")
                       .add_int("T_mult", 1, "each cosine this many times longer than the last")
                       .add_float("eta_min", 0.0, "the lowest rate"),
                   "epoch", true),
      [](const InitArgs& a) {
        const int64_t t0 = a.get_int("T_0"), t_mult = a.get_int("T_mult");
        const double eta_min = a.get_float("eta_min");
        return spec_of(a, [=](torch::optim::Optimizer& o) {
          return std::make_shared<CosineAnnealingWarmRestarts>(o, t0, t_mult, eta_min);
        });
      });
  r.add<LRSchedulerSpec>(
      "OneCycleLR", "the 1cycle policy: up to max_lr, then far below the first rate, in total_steps steps",
      add_stepping(ArgSchema()
                       .add_required("max_lr", ArgType::kFloat, "the highest rate")
                       .add_required("total_steps", ArgType::kInt, "the cycle's steps")
                       .add_float("pct_start", 0.3, "the share of the cycle spent raising the rate")
                       .add_string("anneal_strategy", std::string("cos"), "how the rate moves", {"cos", "linear"})
                       .add_bool("cycle_momentum", true, "cycle SGD's momentum (Adam's beta1) inversely")
                       .add_float("base_momentum", 0.85, "the lowest momentum")
                       .add_float("max_momentum", 0.95, "the highest momentum")
                       .add_float("div_factor", 25.0, "the first rate is max_lr / div_factor")
                       .add_float("final_div_factor", 1e4, "the last rate is the first / final_div_factor")
                       .add_bool("three_phase", false, "back down to the first rate before the last"),
                   "step", false),
      [](const InitArgs& a) {
        OneCycleLROptions options(a.get_float("max_lr"), a.get_int("total_steps"));
        options.pct_start(a.get_float("pct_start"))
            .anneal_strategy(a.get_string("anneal_strategy"))
            .cycle_momentum(a.get_bool("cycle_momentum"))
            .base_momentum(a.get_float("base_momentum"))
            .max_momentum(a.get_float("max_momentum"))
            .div_factor(a.get_float("div_factor"))
            .final_div_factor(a.get_float("final_div_factor"))
            .three_phase(a.get_bool("three_phase"));
        return spec_of(a, [=](torch::optim::Optimizer& o) { return std::make_shared<OneCycleLR>(o, options); });
      });
  r.add<LRSchedulerSpec>(
      "ReduceLROnPlateau", "lower the rate when the monitored metric stops improving",
      add_stepping(ArgSchema()
                       .add_string("monitor", std::string("val_loss"), "the logged metric it follows")
                       .add_bool("strict", true, "a step without the metric logged is an error (else a warning)")
                       .add_string("mode", std::string("min"), "whether the metric should fall or rise", {"min", "max"})
                       .add_float("factor", 0.1, "the new rate is the old one times factor")
                       .add_int("patience", 10, "intervals without improvement before the rate falls")
                       .add_float("threshold", 1e-4, "what counts as an improvement")
                       .add_string("threshold_mode", std::string("rel"), "threshold as a share or an amount",
                                   {"rel", "abs"})
                       .add_int("cooldown", 0, "intervals to wait after a reduction")
                       .add_float("min_lr", 0.0, "the lowest rate")
                       .add_float("eps", 1e-8, "a smaller change is not made"),
                   "epoch", false),
      [](const InitArgs& a) {
        ReduceLROnPlateauOptions options;
        options.mode(a.get_string("mode"))
            .factor(a.get_float("factor"))
            .patience(a.get_int("patience"))
            .threshold(a.get_float("threshold"))
            .threshold_mode(a.get_string("threshold_mode"))
            .cooldown(a.get_int("cooldown"))
            .min_lr({a.get_float("min_lr")})
            .eps(a.get_float("eps"));
        auto spec = spec_of(a, [=](torch::optim::Optimizer& o) {
          return std::make_shared<ReduceLROnPlateau>(o, options);
        });
        spec->monitor = a.get_string("monitor");
        spec->strict = a.get_bool("strict");
        return spec;
      });
}

}  // namespace lt
