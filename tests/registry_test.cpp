// The registry: built-ins registered by explicit calls, names checked, and
// each kind described once (LT_REGISTRY_KINDS). Plugins: tests/cli/plugins_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include <lightning_cpp/callbacks/registration.h>
#include <lightning_cpp/cli/register_builtins.h>
#include <lightning_cpp/core/callback.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/strategy.h>
#include <lightning_cpp/loops/fit_loop.h>

namespace {

TEST(Registry, GlobalHasTheBuiltinsWithoutStaticRegistrars) {
  // The test binary links lightning_cpp as users do; builtins come from
  // explicit register_builtin_* calls, so none can be dropped by the linker.
  lt::Registry& r = lt::Registry::global();
  EXPECT_TRUE(r.contains<lt::Strategy>("single_device"));
  EXPECT_TRUE(r.contains<lt::Strategy>("ddp"));
  for (const char* cb : {"EarlyStopping", "ModelCheckpoint", "LearningRateMonitor", "ProgressBar", "Timer"}) {
    EXPECT_TRUE(r.contains<lt::Callback>(cb)) << cb;
  }
  EXPECT_TRUE(r.contains<lt::Logger>("CSVLogger"));
  EXPECT_TRUE(r.contains<lt::Logger>("ConsoleLogger"));
  EXPECT_TRUE(r.contains<lt::Logger>("TensorBoardLogger"));
  EXPECT_TRUE(r.contains<lt::FitLoop>("FitLoop"));
  EXPECT_EQ(&r, &lt::Registry::global());
}

TEST(Registry, DuplicateNameIsAnError) {
  lt::Registry r;
  lt::register_builtins(r);
  try {
    lt::register_builtin_callbacks(r);
    FAIL() << "expected a duplicate-name error";
  } catch (const lt::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "Registry: callback 'EarlyStopping' is registered twice (by builtin and by builtin)");
  }
}

TEST(Registry, UnknownNameListsKnownOnes) {
  lt::Registry r;
  lt::register_builtins(r);
  try {
    r.get<lt::Logger>("CsvLogger");
    FAIL();
  } catch (const lt::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown logger 'CsvLogger'; did you mean 'CSVLogger'? "
              "(registered loggers: CSVLogger, ConsoleLogger, MLflowLogger, TensorBoardLogger)");
  }
  auto es = r.create<lt::Callback>("EarlyStopping");
  EXPECT_EQ(es->name(), "EarlyStopping");
}

TEST(Registry, DescribeListsEveryKindOnceWithItsDefaults) {
  lt::Registry r;
  lt::register_builtins(r);
  const std::string text = r.describe();
  for (const char* title : {"Callbacks:", "Loggers:", "Strategies:", "Loops:"}) {
    const size_t at = text.find(title);
    ASSERT_NE(at, std::string::npos) << title << "\n" << text;
    EXPECT_EQ(text.find(title, at + 1), std::string::npos) << title << " listed twice\n" << text;
  }
  // Defaults come from the Options structs: DDPStrategyOptions, EarlyStoppingOptions.
  EXPECT_NE(text.find("process_group_timeout=180.0"), std::string::npos) << text;
  EXPECT_NE(text.find("bucket_cap_mb=25.0"), std::string::npos) << text;
  EXPECT_NE(text.find("patience=3"), std::string::npos) << text;
  EXPECT_NE(text.find("join_mode=lockstep"), std::string::npos) << text;  // lockstep Join is the default
  EXPECT_EQ(text.find("Models:"), std::string::npos) << "no model is built in\n" << text;
}

}  // namespace
