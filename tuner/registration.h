#pragma once
// The tuner's callbacks a config may name: LearningRateFinder (LightningCLI's
// form of lr_find, which the lightning-cpp command runs before fit).

namespace lt {

class Registry;

void register_tuner_callbacks(Registry& registry);

}  // namespace lt
