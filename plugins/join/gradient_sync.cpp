#include <lightning_cpp/plugins/join/gradient_sync.h>

namespace lt {

GradientSync::~GradientSync() {
  if (!heartbeat_) return;
  try {
    heartbeat_->wait();
  } catch (const std::exception&) {
    // Destroyed after a failed step: the error has been reported already.
  }
}

void GradientSync::before_forward() {
  // The heartbeat: not waited here (DDP hands it to its Reducer; the others wait in backward).
  heartbeat_ = Join::notify_join_context(*this);
  c10::intrusive_ptr<c10d::Work> flag;
  if (join_config().enable && !join_config().scheduled) flag = grad_sync_flag(/*joined=*/false);
  forward_collectives();
  if (flag) flag->wait();
}

bool GradientSync::joined_iteration_reduces() {
  if (join_config().scheduled) {
    LT_INTERNAL_ASSERT(epoch_.scheduled_reduces, "scheduled Join without the iterations' gradient syncs");
    return epoch_.scheduled_reduces();
  }
  torch::Tensor flag;
  grad_sync_flag(/*joined=*/true, &flag)->wait();
  return flag.item<double>() != 0.0;
}

}  // namespace lt
