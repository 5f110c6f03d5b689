#pragma once
// The consumer's own trainer/trainer.h (see data/dataset.h).
namespace consumer {
struct Trainer {
  int epochs = 0;
};
}  // namespace consumer
