// docs/distributed.md's strategy options, as the body of a function (built, not run).
#include <chrono>

#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

void configure_ddp() {
  // @SNIPPET@
}

int main() {}  // built only: see the comment at the top
