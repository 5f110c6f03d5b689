// docs/precision.md's hand-built precision plugin, as the body of a function (built, not run: it needs CUDA).
#include <lightning_cpp/plugins/precision/precision.h>
#include <lightning_cpp/trainer/trainer.h>

void configure_precision() {
  // @SNIPPET@
}

int main() {}  // built only: see the comment at the top
