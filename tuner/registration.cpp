#include <lightning_cpp/tuner/registration.h>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/tuner/lr_finder.h>

namespace lt {

void register_tuner_callbacks(Registry& r) {
  // Its init args are LRFinderOptions' rows (tuner/lr_finder_options.def), in their order.
  r.add<Callback>(
      "LearningRateFinder", "lr_find before fit; the model is built with the suggested learning rate",
      [] {
        ArgSchema schema;
        const LRFinderOptions defaults;
#define LT_OPTION LT_OPTION_SCHEMA
#include <lightning_cpp/tuner/lr_finder_options.def>
#undef LT_OPTION
        return schema;
      }(),
      [](const InitArgs& args) {
        LRFinderOptions options;
#define LT_OPTION LT_OPTION_READ
#include <lightning_cpp/tuner/lr_finder_options.def>
#undef LT_OPTION
        return std::make_shared<LearningRateFinder>(options);
      });
}

}  // namespace lt
