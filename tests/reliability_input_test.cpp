// Reliability on hostile input (issue "Hardening"): corrupt checkpoints,
// planted links, alias bombs, NUL bytes, many keys, huge numbers, a full
// disk, leftovers of killed runs. Each case ends with its expected message and
// exit code, loses nothing and leaves nothing behind. The cases that need
// DDP workers are in tests/plugins/launchers/local_spawn_test.cpp (LocalSpawn.AnUncreatableWorkerLogDir...,
// Rendezvous.AStaleRankEnvironment...) and tests/plugins/launchers/launcher_failures_test.cpp
// (Failures.*: each failure printed once).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "fashion_mnist/fashion_mnist.h"
#include "fashion_mnist/registration.h"
#include "support/cli_fixture.h"
#include "support/multiprocess.h"

namespace {

namespace fs = std::filesystem;
using lt::testing::CliResult;
using lt::testing::CliTest;
using lt::testing::TinyData;
using lt::testing::TinyNet;
using lt::testing::read_file;

// -- configs and the command line: exit 2, a located message, nothing written ---------------

struct HostileConfig : CliTest {};

// Hostile configs (issue: hardening): each ends at once with exit 2 and a
// located message, writing nothing.
TEST_F(HostileConfig, AnAliasBombIsRefusedBeforeItExpands) {
  // 9 levels of 9 aliases: 9^9 values once expanded (yaml-cpp shares them).
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 9; ++level) {
    yaml += c10::str("a", level, ": &a", level, " [");
    for (int i = 0; i < 9; ++i) yaml += c10::str(i ? ", " : "", "*a", level - 1);
    yaml += "]\n";
  }
  yaml += "model: TinyNet\ndata: TinyData\n";
  const std::string path = write("bad.yaml", yaml);
  const CliResult r = cli({"fit", "--config", path});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("the config expands to more than 100000 values (YAML aliases of aliases?)"), std::string::npos)
      << r.err;
  EXPECT_EQ(listing(), std::vector<std::string>{"bad.yaml"});
}

TEST_F(HostileConfig, ANulByteInAValueIsRefused) {
  expect_config_error("model: TinyNet\ndata: TinyData\ntrainer:\n  default_root_dir: \"out/nul_a\\0_b\"\n",
                      "{f}:4: trainer.default_root_dir: a NUL byte (\\0) in 'out/nul_a\\0...'; config values and keys "
                      "cannot contain one");
}

TEST_F(HostileConfig, ManyKeysUnderAnUnknownKeyAreRefusedInLinearTime) {
  std::string yaml = "model: TinyNet\ndata: TinyData\nbogus:\n";
  for (int i = 0; i < 50000; ++i) yaml += c10::str("  k", i, ": 1\n");
  const std::string path = write("bad.yaml", yaml);
  const CliResult r = cli({"fit", "--config", path});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(":3: bogus: unknown key"), std::string::npos) << r.err.substr(0, 300);
}

TEST_F(HostileConfig, AHugeListIndexOnTheCommandLineIsAConfigError) {
  const std::string path = write("a.yaml", "model: TinyNet\ndata: TinyData\ncallbacks: [{class_path: EarlyStopping}]\n");
  const CliResult r = cli({"fit", "--config", path, "--callbacks.99999999999999999999999.init_args.monitor=x"});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("callbacks is a list of 1 item(s); '99999999999999999999999' is not an index into it"),
            std::string::npos)
      << r.err;
}

TEST_F(HostileConfig, AFolderAsConfigIsAnError) {
  fs::create_directory(dir_ / "conf");
  const CliResult r = cli({"fit", "--config", (dir_ / "conf").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: " + (dir_ / "conf").string() + ": is a directory, not a config file\n");
}

// An input error found after the run wrote files is no longer "nothing
// happened" (exit 2): a monitored key never logged is found at the first
// checkpoint, after config.yaml and metrics.csv.
TEST_F(HostileConfig, AnInputErrorAfterFilesWereWrittenExitsOne) {
  const std::string a = write("a.yaml",
                              "trainer: {max_epochs: 1, enable_progress_bar: false}\nmodel: TinyNet\ndata: TinyData\n"
                              "callbacks: [{class_path: ModelCheckpoint, init_args: {monitor: nope}}]\n");
  const CliResult r = cli({"fit", "--config", a});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("ModelCheckpoint(monitor='nope') could not find the monitored key"), std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "config.yaml"));
}

TEST_F(HostileConfig, DeepNestingIsNamed) {
  const std::string path =
      write("bad.yaml", "model: TinyNet\ndata: TinyData\nx: " + std::string(600, '[') + std::string(600, ']') + "\n");
  const CliResult r = cli({"fit", "--config", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: " + path + ":3: invalid YAML: nested more than 500 levels deep (a config needs a few)\n");
}

// A byte flipped inside a record of a good checkpoint: the zip's CRC-32 no
// longer matches (LibTorch's reader would load it and validate wrong
// weights). validate and fit refuse it with exit 2 and write nothing.
TEST_F(HostileConfig, ACheckpointWithAFlippedByteIsRefused) {
  const std::string a = write("a.yaml",
                              "trainer: {max_epochs: 1, enable_progress_bar: false}\nmodel: TinyNet\ndata: TinyData\n"
                              "callbacks: [{class_path: ModelCheckpoint, init_args: {save_last: true}}]\n");
  ASSERT_EQ(cli({"fit", "--config", a}).code, 0);
  const fs::path good = dir_ / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt";
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The first record's data: after its 30-byte local header, name and extra field.
  auto le16 = [&](size_t at) { return static_cast<uint8_t>(bytes[at]) | static_cast<uint8_t>(bytes[at + 1]) << 8; };
  ASSERT_EQ(bytes.compare(0, 4, "PK\x03\x04"), 0);
  const size_t data = 30 + le16(26) + le16(28);
  const std::string name = bytes.substr(30, le16(26));
  bytes[data + 3] = static_cast<char>(bytes[data + 3] ^ 0x5a);
  const std::string flipped = (dir_ / "flipped.ckpt").string();
  std::ofstream(flipped, std::ios::binary) << bytes;
  const auto before = listing();
  for (const char* command : {"validate", "fit"}) {
    const CliResult r = cli({command, "--config", a, "--ckpt_path", flipped});
    EXPECT_EQ(r.code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("checkpoint '" + flipped + "' is truncated or corrupt (" + std::to_string(bytes.size()) +
                         " bytes): record '" + name + "' fails its CRC-32 check (stored "),
              std::string::npos)
        << command << ": " << r.err;
  }
  EXPECT_EQ(listing(), before) << "a refused checkpoint writes nothing";
  const CliResult again = cli({"validate", "--config", a, "--ckpt_path", flipped});
  EXPECT_EQ(again.err.find("OrderedDict"), std::string::npos) << "no hint about Python's OrderedDict: " << again.err;
  // A folder, or a device, as ckpt_path.
  fs::create_directory(dir_ / "folder.ckpt");
  CliResult r = cli({"validate", "--config", a, "--ckpt_path", (dir_ / "folder.ckpt").string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is a folder with no meta.pt: neither a checkpoint file nor a sharded checkpoint"),
            std::string::npos)
      << r.err;
  r = cli({"validate", "--config", a, "--ckpt_path", "/dev/zero"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("checkpoint '/dev/zero' is not a regular file"), std::string::npos) << r.err;
}

// The example's data and model options that were accepted and failed late or
// silently: val_size -1, and lr 1e-7 written to hparams.yaml as 0.000000.
TEST_F(HostileConfig, FashionMnistOptionsAreCheckedAndKeptExactly) {
  lt::examples::register_fashion_mnist(registry_);
  const std::string config = std::string(LT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml";
  const CliResult bad = cli({"fit", "--config", config, "--data.init_args.val_size=-1"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("FashionMnistDataModule: val_size must be in [0, 60000) (images held out of the 60000 "
                         "training images), got -1"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(listing(), std::vector<std::string>{});
  lt::examples::MlpClassifier model(lt::examples::ClassifierOptions().lr(1e-7).hidden(64));
  EXPECT_EQ(model.hparams().at("lr"), lt::HParam(1e-7));  // the number, exactly
  EXPECT_EQ(model.hparams().at("hidden"), lt::HParam(64));
}

// -- checkpoint files: exclusive temporaries, leftovers of killed runs, a full disk ---------

struct RunInTempFolder : CliTest {
  lt::TrainerOptions options(int64_t epochs) const {
    return lt::TrainerOptions().max_epochs(epochs).default_root_dir(dir_.string()).seed(0);
  }
};

// A link another user plants at the name the writer used to take
// (<path>.tmp.<pid>) is never followed: the file it points at keeps its
// bytes and mode. Checkpoints follow the umask, as every file the run writes.
TEST_F(RunInTempFolder, TemporaryFilesAreCreatedExclusivelyAndFollowTheUmask) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "secret";
  fs::permissions(victim, fs::perms::owner_read | fs::perms::owner_write);
  const std::string path = (dir_ / "last.ckpt").string();
  fs::create_symlink(victim, path + ".tmp." + std::to_string(::getpid()));
  const mode_t old_mask = ::umask(077);
  lt::atomic_pickle_save(c10::IValue(int64_t{7}), path);
  ::umask(022);
  lt::atomic_pickle_save(c10::IValue(int64_t{8}), path + "2");
  ::umask(old_mask);
  EXPECT_EQ(read_file(victim), "secret");
  EXPECT_EQ(fs::status(victim).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(lt::pickle_load_file(path).toInt(), 7);
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write)
      << "umask 077";
  EXPECT_EQ(fs::status(path + "2").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read)
      << "umask 022";
}

// Temporary files of writers that died (their pid is gone) are removed when
// the next run's ModelCheckpoint starts, with a warning; a live writer's and
// another host's are kept.
TEST_F(RunInTempFolder, StaleTemporaryFilesOfDeadWritersAreRemoved) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);  // a pid no process has now
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string me(host);
  std::replace(me.begin(), me.end(), '.', '_');
  const fs::path ckpts = dir_ / "ckpts";
  fs::create_directories(ckpts);
  const std::vector<std::string> dead = {"last.ckpt.tmp." + me + "." + std::to_string(child) + ".0123abcd",
                                         "epoch=0-step=4.ckpt.tmp." + std::to_string(child)};
  const std::vector<std::string> kept = {"last.ckpt.tmp." + me + "." + std::to_string(::getpid()) + ".00ff",
                                         "last.ckpt.tmp.otherhost." + std::to_string(child) + ".00ff"};
  for (const auto& name : dead) std::ofstream(ckpts / name) << "partial";
  for (const auto& name : kept) std::ofstream(ckpts / name) << "partial";
  std::vector<std::string> warnings;
  auto previous = lt::set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
  auto checkpoint = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(ckpts.string()));
  lt::Trainer trainer(options(1).callbacks({checkpoint}).enable_progress_bar(false));
  trainer.fit(std::make_shared<TinyNet>(4, 0.05), std::make_shared<TinyData>());
  lt::set_warning_handler(previous);
  for (const auto& name : dead) EXPECT_FALSE(fs::exists(ckpts / name)) << name;
  for (const auto& name : kept) EXPECT_TRUE(fs::exists(ckpts / name)) << name;
  bool warned = false;
  for (const auto& w : warnings) warned = warned || w.find("removed 2 temporary file(s)") != std::string::npos;
  EXPECT_TRUE(warned);
}

// A run killed between saving a top-k checkpoint and removing the one it
// replaced leaves a file no top-k keeps: the resumed run names it (and keeps
// it); a run whose folder holds only what it keeps says nothing.
TEST_F(RunInTempFolder, OrphanCheckpointFilesAreReportedOnResume) {
  const fs::path ckpts = dir_ / "ckpts";
  auto checkpoint = [&] {
    return std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(ckpts.string()).monitor("val_loss").save_top_k(2).save_last(true));
  };
  auto fit = [&](int64_t epochs, const std::string& ckpt_path) {
    std::vector<std::string> warnings;
    auto previous = lt::set_warning_handler([&](const std::string& m) { warnings.push_back(m); });
    lt::Trainer trainer(options(epochs).callbacks({checkpoint()}).enable_progress_bar(false));
    trainer.fit(std::make_shared<TinyNet>(4, 0.05), std::make_shared<TinyData>(), ckpt_path);
    lt::set_warning_handler(previous);
    std::string orphans;
    for (const auto& w : warnings) {
      if (w.find("are not among the checkpoints this run keeps") != std::string::npos) orphans += w;
    }
    return orphans;
  };
  EXPECT_EQ(fit(3, ""), "");
  EXPECT_EQ(fit(4, "last"), "") << "a clean resume";
  fs::copy_file(ckpts / "last.ckpt", ckpts / "epoch=7-step=99.ckpt");
  const std::string warning = fit(5, "last");
  EXPECT_NE(warning.find("ModelCheckpoint: 1 checkpoint file(s) in '" + ckpts.string()), std::string::npos) << warning;
  EXPECT_NE(warning.find("count toward no top-2 and are never removed: epoch=7-step=99.ckpt"), std::string::npos)
      << warning;
  EXPECT_TRUE(fs::exists(ckpts / "epoch=7-step=99.ckpt"));
}

// A full disk (a 64 KiB tmpfs): the error names the file and the OS error,
// the partial file is removed and the previous checkpoint is intact.
TEST_F(RunInTempFolder, AFullDiskIsAClearErrorAndLeavesNothingBehind) {
  const fs::path mount = dir_ / "small";
  fs::create_directories(mount);
  if (std::system(("mount -t tmpfs -o size=64k tmpfs '" + mount.string() + "' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  }
  const std::string path = (mount / "last.ckpt").string();
  lt::atomic_pickle_save(c10::IValue(int64_t{1}), path);
  std::string error;
  try {
    lt::atomic_pickle_save(c10::IValue(torch::zeros({64 * 1024})), path);  // 256 KiB
  } catch (const lt::Error& e) {
    error = e.what();
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(mount)) names.push_back(entry.path().filename().string());
  const bool intact = lt::pickle_load_file(path).toInt() == 1;
  // metrics.csv on the full disk: the run stops naming the file, whose rows
  // so far stay whole (no partial line).
  std::string logger_error;
  std::string csv_before, csv_after;
  {
    lt::CSVLogger logger(lt::CSVLoggerOptions().save_dir((mount / "logs").string()).flush_logs_every_n_steps(1));
    logger.log_metrics({{"loss", 0.5}}, 0);
    csv_before = read_file(fs::path(logger.log_dir()) / "metrics.csv");
    {  // fill the disk
      std::ofstream filler(mount / "filler", std::ios::binary);
      const std::string block(4096, 'x');
      while (filler.write(block.data(), block.size())) {
      }
    }
    try {
      for (int64_t step = 1; step < 2000; ++step) logger.log_metrics({{"loss", 0.25}}, step);
    } catch (const lt::Error& e) {
      logger_error = e.what();
    }
    csv_after = read_file(fs::path(logger.log_dir()) / "metrics.csv");
  }
  (void)std::system(("umount '" + mount.string() + "'").c_str());
  EXPECT_NE(logger_error.find("metrics.csv' failed: No space left on device"), std::string::npos) << logger_error;
  EXPECT_EQ(csv_after.rfind(csv_before, 0), 0u);
  EXPECT_EQ(csv_after.back(), '\n') << "a partial line stayed";
  EXPECT_NE(error.find("writing '" + path + ".tmp."), std::string::npos) << error;
  EXPECT_NE(error.find("No space left on device (removed; '" + path + "' is unchanged)"), std::string::npos) << error;
  EXPECT_EQ(names, std::vector<std::string>{"last.ckpt"}) << "before the logger filled the disk";
  EXPECT_TRUE(intact);
}

// -- the checkpoint reader and the loader on hostile values ---------------------------------

// The checkpoint reader on mutated checkpoints (bytes flipped, cut, inserted
// or zeroed, in the zip headers, the directory, the pickle and the tensor
// records): every input loads or fails with lt::ValueError; none crashes.
TEST(CheckpointFuzz, EveryMutatedCheckpointLoadsOrFailsWithACleanError) {
  char tmpl[] = "/tmp/lt_ckpt_fuzz_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string good = dir + "/good.ckpt";
  lt::StateDict ckpt = lt::new_state_dict();
  ckpt.insert("epoch", int64_t{3});
  ckpt.insert("weights", torch::arange(64, torch::kFloat).reshape({8, 8}));
  ckpt.insert("bias", torch::ones({8}));
  lt::atomic_pickle_save(ckpt, good);
  std::string original;
  {
    std::ifstream in(good, std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::mt19937 rng(20261203);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const std::string path = dir + "/mutated.ckpt";
  int loaded = 0, rejected = 0, iterations = 0;
  for (; iterations < 3000 && std::chrono::steady_clock::now() < deadline; ++iterations) {
    std::string bytes = original;
    for (int m = 0, n = 1 + static_cast<int>(rng() % 3); m < n && !bytes.empty(); ++m) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0:
          bytes[at] = static_cast<char>(bytes[at] ^ (1 + rng() % 255));
          break;
        case 1:
          bytes.resize(at);
          break;
        case 2:
          bytes.insert(at, std::string(1 + rng() % 8, static_cast<char>(rng())));
          break;
        default:
          std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                    bytes.begin() + static_cast<std::ptrdiff_t>(std::min(bytes.size(), at + 1 + rng() % 16)), '\0');
      }
    }
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      (void)lt::pickle_load_file(path);
      ++loaded;
    } catch (const lt::ValueError& e) {
      ASSERT_NE(std::string(e.what()).find("checkpoint '" + path + "' is truncated or corrupt"), std::string::npos)
          << e.what();
      ++rejected;
    } catch (const std::exception& e) {
      FAIL() << "not a clean error (" << typeid(e).name() << "): " << e.what();
    }
  }
  std::printf("checkpoint fuzz: %d inputs, %d loaded, %d rejected with lt::ValueError\n", iterations, loaded,
              rejected);
  std::filesystem::remove_all(dir);
  EXPECT_GT(rejected, iterations / 2);
}

TEST(DataLoaderSize, AHugeBatchSizeIsOneBatch) {
  auto data = std::make_shared<lt::TensorDataset>(torch::randn({10, 2}), torch::randn({10, 1}));
  lt::DataLoader loader(data, lt::DataLoaderOptions(std::numeric_limits<int64_t>::max()));
  EXPECT_EQ(loader.size(), 1);
  EXPECT_EQ(loader.get(0).data.size(0), 10);
  lt::DataLoader dropping(data, lt::DataLoaderOptions(std::numeric_limits<int64_t>::max()).drop_last(true));
  EXPECT_EQ(dropping.size(), 0);
}

// An optimizer option the parameters cannot take (lr 1e39 on float32: beyond
// its range) is named with the step it failed at, not only LibTorch's
// conversion error.
TEST_F(RunInTempFolder, AFailingOptimizerStepNamesTheLearningRates) {
  lt::Trainer trainer(options(1).enable_progress_bar(false));
  try {
    trainer.fit(std::make_shared<TinyNet>(4, 1e39), std::make_shared<TinyData>());
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the optimizer step failed at epoch 0, global step 0 (lr of its parameter groups: 1e+39): "),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("value cannot be converted to type float without overflow"), std::string::npos) << what;
  }
}

}  // namespace
