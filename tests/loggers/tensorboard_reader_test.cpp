// TensorBoardLogger read by TensorBoard itself: the tensorboard package's
// EventAccumulator (tests/python/tensorboard_reader.py) reads back the
// scalars, the hyperparameters, texts (SummaryWriter.add_text's tag and
// plugin) and histograms (count, sum, sum of squares, buckets) we wrote;
// find_logger finds the TensorBoardLogger inside a collection.
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/logger_collection.h>
#include <lightning_cpp/loggers/tensorboard.h>

#include "loggers/tensorboard_fixture.h"
#include "support/command.h"

using namespace lt::testing;

namespace {

// The reader's lines for a log folder.
std::vector<std::string> read_with_tensorboard(const std::filesystem::path& dir, int& rc) {
  return command_lines(std::string(LT_PYTHON) + " -W ignore " + LT_SOURCE_DIR +
                           "/tests/python/tensorboard_reader.py '" + dir.string() + "'",
                       rc);
}

bool has(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

TEST_F(TensorBoardLoggerTest, TensorBoardsOwnReaderReadsScalarsHparamsTextsAndHistograms) {
  // scripts/install-deps.sh installs the tensorboard package into the venv; missing, the test fails.
  ASSERT_EQ(std::system((std::string(LT_PYTHON) + " -c 'import tensorboard' > /dev/null 2>&1").c_str()), 0)
      << LT_PYTHON << " has no tensorboard package (scripts/install-deps.sh installs it)";
  auto tensorboard = std::make_shared<lt::TensorBoardLogger>(lt::TensorBoardLoggerOptions(dir_.string()));
  auto csv = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  lt::LoggerCollection loggers({csv, tensorboard});
  EXPECT_EQ(lt::find_logger<lt::TensorBoardLogger>(&loggers), tensorboard.get());
  EXPECT_EQ(lt::find_logger<lt::TensorBoardLogger>(csv.get()), nullptr);

  loggers.log_hyperparams({{"lr", 0.25}, {"model", "mlp"}});
  loggers.log_metrics({{"train_loss", 0.5}}, 3);
  auto* tb = lt::find_logger<lt::TensorBoardLogger>(&loggers);
  tb->add_text("sample", "the **quick** fox, é", 3);
  tb->add_text("sample", "a second text", 7);
  tb->add_histogram("weights", torch::arange(100, torch::kFloat), 7, 10);
  loggers.finalize("success");

  int rc = -1;
  const std::vector<std::string> lines = read_with_tensorboard(tensorboard->log_dir(), rc);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  ASSERT_EQ(rc, 0) << all;
  EXPECT_TRUE(has(lines, "scalar train_loss 3 0.5")) << all;
  EXPECT_TRUE(has(lines, "hparam lr 0.25")) << all;
  EXPECT_TRUE(has(lines, "hparam model mlp")) << all;
  EXPECT_TRUE(has(lines, "text sample/text_summary 3 the **quick** fox, é")) << all;
  EXPECT_TRUE(has(lines, "text sample/text_summary 7 a second text")) << all;
  // 0..99: min 0, max 99, 100 values summing to 4950, squares to 328350, in 10 buckets ending at 99.
  EXPECT_TRUE(has(lines, "histogram weights 7 0.0 99.0 100.0 4950.0 328350.0 10 100.0 99.0")) << all;
  EXPECT_THROW(tb->add_histogram("bad", torch::tensor({1.0, std::nan("")}), 8), lt::ValueError);
}

}  // namespace
