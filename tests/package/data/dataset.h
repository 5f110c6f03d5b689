#pragma once
// The consumer's own data/dataset.h, on its include path ahead of
// lightning-cpp's: the library's headers must not pick it up.
namespace consumer {
struct Dataset {
  int rows = 0;
};
}  // namespace consumer
