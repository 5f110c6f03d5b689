#include <lightning_cpp/core/trainer_options.h>

#include <set>

#include <torch/cuda.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/profiler.h>

namespace lt {

namespace {
void check_limit(const FractionOrCount& v, const char* name) {
  if (v.is_count()) {
    LT_CHECK_VALUE(v.count() >= 0, "trainer.", name, " must be >= 0 batches, got ", v.count());
  } else {
    LT_CHECK_VALUE(v.fraction() >= 0.0 && v.fraction() <= 1.0, "trainer.", name,
                   " must be a fraction in [0.0, 1.0] or a batch count, got ", v.fraction());
  }
}
}  // namespace

c10::DeviceType TrainerOptions::device_type() const {
  if (accelerator_ == "cuda") return torch::kCUDA;
  if (accelerator_ == "auto") return torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  LT_CHECK_VALUE(accelerator_ == "cpu", "trainer.accelerator must be one of cpu, cuda, auto; got '", accelerator_, "'");
  return torch::kCPU;
}

OptionValues TrainerOptions::rank_agreed_options() const {
  static const std::set<std::string> kAgreed = {
      "max_epochs", "max_steps", "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm",
      "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps", "fast_dev_run", "overfit_batches",
      "accelerator", "devices", "num_nodes", "on_nonfinite", "use_distributed_sampler"};
  OptionValues values;
  {
    const TrainerOptions& options = *this;
#define LT_OPTION LT_OPTION_SHOW
#define LT_OPTION_WITH LT_OPTION_WITH_SHOW
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/core/trainer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
#undef LT_CPP_OPTION
  }
  OptionValues agreed;
  for (auto& [name, value] : values) {
    if (kAgreed.count(name) != 0) agreed.emplace_back("trainer." + name, std::move(value));
  }
  LT_INTERNAL_ASSERT(agreed.size() == kAgreed.size(), "rank_agreed_options: a name not in trainer_options.def");
  return agreed;
}

void TrainerOptions::validate() const {
  LT_CHECK_VALUE(default_root_dir_.find('\0') == std::string::npos, "trainer.default_root_dir: '",
                 default_root_dir_.substr(0, default_root_dir_.find('\0')), "\\0...' contains a NUL byte");
  {
    const TrainerOptions& options = *this;
    const char* owner = "trainer.";
#define LT_OPTION LT_OPTION_CHECK
#define LT_OPTION_WITH LT_OPTION_WITH_CHECK
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/core/trainer_options.def>
#undef LT_OPTION
#undef LT_OPTION_WITH
#undef LT_CPP_OPTION
  }
  // What a row's one condition cannot say: a batch count or a fraction.
  if (val_check_interval_.is_count()) {
    LT_CHECK_VALUE(val_check_interval_.count() >= 1, "trainer.val_check_interval must be >= 1 batch, got ",
                   val_check_interval_.count());
  } else {
    LT_CHECK_VALUE(val_check_interval_.fraction() > 0.0 && val_check_interval_.fraction() <= 1.0,
                   "trainer.val_check_interval must be a fraction in (0.0, 1.0] or a batch count, got ",
                   val_check_interval_.fraction());
  }
  check_limit(limit_train_batches_, "limit_train_batches");
  check_limit(limit_val_batches_, "limit_val_batches");
  check_limit(limit_test_batches_, "limit_test_batches");
  check_limit(limit_predict_batches_, "limit_predict_batches");
  check_limit(overfit_batches_, "overfit_batches");
  device_type();  // names the valid accelerators when this one is none of them
  for (const auto& cb : callbacks_) LT_CHECK_VALUE(cb != nullptr, "trainer.callbacks contains a null callback");
}

void ProfilerByName::add(ArgSchema& schema, const char* name, const std::shared_ptr<Profiler>& /*d*/,
                         const char* doc, std::vector<std::string> choices) {
  schema.add_string(name, std::nullopt, doc, std::move(choices));
}

std::shared_ptr<Profiler> ProfilerByName::read(const InitArgs& args, const char* name) {
  const auto profiler = args.get_optional_string(name);
  if (!profiler) return nullptr;
  if (*profiler == "simple") return std::make_shared<SimpleProfiler>();
  return std::make_shared<TorchProfiler>();  // pytorch (Lightning's name) or torch
}

std::string ProfilerByName::show(const std::shared_ptr<Profiler>& profiler) {
  return profiler ? "a profiler" : "none";
}

}  // namespace lt
