// A plugin built for another plugin API version: the loader must refuse it
// without calling its registration function (tests/cli/plugins_test.cpp).
#include <lightning_cpp/core/registry.h>

namespace {
void register_nothing(lt::Registry&) {}
}  // namespace

extern "C" const lt::PluginInfo* lightning_cpp_plugin_info() {
  static const lt::PluginInfo info{999, "wrong-version", "0.0.0", &register_nothing};
  return &info;
}
