// Bounded random-mutation fuzzing of the YAML config loader: whatever the
// bytes, loading and resolving a config either succeeds or fails with
// lt::ValueError (a clean, located message) — never a crash, another
// exception type, or a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include <lightning_cpp/cli/cli.h>
#include <lightning_cpp/cli/register_builtins.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/checkpoint_io.h>

#include "fashion_mnist/registration.h"

namespace {

namespace fs = std::filesystem;

std::vector<std::string> seed_configs() {
  std::vector<std::string> seeds;
  for (const auto& entry : fs::directory_iterator(fs::path(LT_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    seeds.push_back(ss.str());
  }
  seeds.push_back("trainer: {max_epochs: 2, val_check_interval: 0.5}\nmodel: {class_path: MlpClassifier}\n"
                  "data: {class_path: FashionMnistDataModule, init_args: {batch_size: 8}}\n");
  return seeds;
}

// Fragments that are meaningful to YAML or to our schema.
const std::vector<std::string> kTokens = {
    ":", " ", "\n", "- ", "  ", "{", "}", "[", "]", ",", "\"", "'", "#", "&a", "*a", "!!int ", "!!str ", "|",
    ">", "~", "null", "true", "-1", "1e308", "0.5", "nan", ".inf", "9999999999999999999999", "class_path: ",
    "init_args: ", "trainer:", "model:", "callbacks:", "strategy: ddp", "devices: 0", "max_epochs: x",
    "\t", "\xff\xfe", "<<: *a", "? ", "---\n", "...\n", "%YAML 1.2\n", "\\u0000"};

std::string mutate(std::string text, std::mt19937& rng) {
  std::uniform_int_distribution<int> op_dist(0, 5);
  const int ops = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < ops; ++i) {
    const size_t pos = text.empty() ? 0 : rng() % (text.size() + 1);
    switch (op_dist(rng)) {
      case 0:  // flip a byte
        if (!text.empty()) text[rng() % text.size()] = static_cast<char>(rng() % 256);
        break;
      case 1:  // delete a run
        if (!text.empty()) text.erase(pos, 1 + rng() % 16);
        break;
      case 2:  // insert a token
        text.insert(pos, kTokens[rng() % kTokens.size()]);
        break;
      case 3: {  // duplicate a line
        const size_t begin = text.rfind('\n', pos == 0 ? 0 : pos - 1);
        const size_t end = text.find('\n', pos);
        const size_t b = begin == std::string::npos ? 0 : begin + 1;
        if (end != std::string::npos && end > b) text.insert(b, text.substr(b, end - b + 1));
        break;
      }
      case 4:  // truncate
        text.resize(pos);
        break;
      default:  // swap two halves
        text = text.substr(pos) + text.substr(0, pos);
        break;
    }
  }
  return text;
}

TEST(ConfigFuzz, EveryInputLoadsOrFailsWithACleanError) {
  lt::Registry registry;
  lt::register_builtins(registry);
  lt::examples::register_fashion_mnist(registry);
  const auto seeds = seed_configs();
  ASSERT_GE(seeds.size(), 3u);
  std::mt19937 rng(20261202);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int accepted = 0, rejected = 0, iterations = 0;
  for (; iterations < 20000 && std::chrono::steady_clock::now() < deadline; ++iterations) {
    const std::string text = mutate(seeds[rng() % seeds.size()], rng);
    try {
      auto node = lt::cli::parse_config_text(text, lt::cli::ConfigSource{"fuzz.yaml", 0, ""});
      auto resolved = lt::cli::resolve_config(node, registry, "fit");
      ++accepted;
    } catch (const lt::ValueError& e) {
      ASSERT_NE(std::string(e.what()), "") << "empty message for input:\n" << text;
      ++rejected;
    } catch (const std::exception& e) {
      FAIL() << "not a clean config error (" << typeid(e).name() << "): " << e.what() << "\ninput:\n" << text;
    }
  }
  std::printf("config fuzz: %d inputs, %d accepted, %d rejected with lt::ValueError\n", iterations, accepted,
              rejected);
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
