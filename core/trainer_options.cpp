#include <lightning_cpp/core/trainer_options.h>

#include <torch/cuda.h>

#include <lightning_cpp/core/check.h>

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

void TrainerOptions::validate() const {
  LT_CHECK_VALUE(default_root_dir_.find('\0') == std::string::npos, "trainer.default_root_dir: '",
                 default_root_dir_.substr(0, default_root_dir_.find('\0')), "\\0...' contains a NUL byte");
  LT_CHECK_VALUE(max_epochs_ >= -1, "trainer.max_epochs must be >= -1 (-1: unlimited), got ", max_epochs_);
  LT_CHECK_VALUE(max_steps_ >= -1, "trainer.max_steps must be >= -1 (-1: unlimited), got ", max_steps_);
  LT_CHECK_VALUE(accumulate_grad_batches_ >= 1, "trainer.accumulate_grad_batches must be >= 1, got ",
                 accumulate_grad_batches_);
  LT_CHECK_VALUE(gradient_clip_val_ >= 0.0, "trainer.gradient_clip_val must be >= 0 (0: off), got ",
                 gradient_clip_val_);
  LT_CHECK_VALUE(check_val_every_n_epoch_ >= 1, "trainer.check_val_every_n_epoch must be >= 1, got ",
                 check_val_every_n_epoch_);
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
  LT_CHECK_VALUE(fast_dev_run_ >= 0, "trainer.fast_dev_run must be >= 0 batches (0: off), got ", fast_dev_run_);
  check_limit(overfit_batches_, "overfit_batches");
  LT_CHECK_VALUE(num_sanity_val_steps_ >= -1, "trainer.num_sanity_val_steps must be >= -1 (-1: all), got ",
                 num_sanity_val_steps_);
  device_type();  // names the valid accelerators when this one is none of them
  LT_CHECK_VALUE(devices_ >= 1, "trainer.devices must be >= 1, got ", devices_);
  LT_CHECK_VALUE(num_nodes_ >= 1, "trainer.num_nodes must be >= 1, got ", num_nodes_);
  LT_CHECK_VALUE(log_every_n_steps_ >= 1, "trainer.log_every_n_steps must be >= 1, got ", log_every_n_steps_);
  for (const auto& cb : callbacks_) LT_CHECK_VALUE(cb != nullptr, "trainer.callbacks contains a null callback");
}

}  // namespace lt
