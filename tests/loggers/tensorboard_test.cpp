// TensorBoardLogger: its events files decoded independently of our encoder by
// tests/python/tensorboard_events.py (the TFRecord CRCs computed in Python,
// the Event, Summary and HParams messages parsed by python3-protobuf from a
// .proto of TensorBoard's field numbers), version folders as CSVLogger picks
// them, buffering, resume, and nothing written before the first write.
// This file: loggers/tensorboard.h alone: scalars and hparams, the checker
// itself, options, versions, restored state, failed writes, the registry.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/cli/register_builtins.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/core/trainer_options.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/tensorboard.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/seeding.h"
#include "loggers/tensorboard_fixture.h"

using namespace lt::testing;  // the checker and its helpers (loggers/tensorboard_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST_F(TensorBoardLoggerTest, ScalarsAndHparamsDecodeIndependently) {
  ASSERT_NO_FATAL_FAILURE(require_checker());
  const double before = unix_seconds();
  lt::TensorBoardLogger logger(lt::TensorBoardLoggerOptions(dir_.string()).flush_logs_every_n_steps(1000));
  // Typed as given: a number given as a string ("8") stays a string.
  logger.log_hyperparams({{"lr", 1e-7},
                          {"hidden", 256},
                          {"shift", -2.5},
                          {"optimizer", "adam w"},
                          {"amsgrad", true},
                          {"bias", false},
                          {"run", "7a"},
                          {"width", "8"}});
  logger.log_metrics({{"train_loss", 0.1234567891}, {"tiny", 1e-8}}, 3);
  logger.log_metrics({{"val/acc", 2.0 / 3.0}}, 7);
  logger.log_metrics({{"huge", -2.5e30}}, int64_t{1} << 40);  // a 6-byte varint step
  logger.finalize("success");
  const double after = unix_seconds();
  // The values are rounded to float32 (simple_value): the check sees that.
  ASSERT_NE(static_cast<double>(static_cast<float>(0.1234567891)), 0.1234567891);

  const fs::path version0 = dir_ / "lightning_logs" / "version_0";
  EXPECT_EQ(logger.log_dir(), version0.string());
  const auto files = events_files(version0);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].string(), logger.events_file());
  // TensorFlow's name: events.out.tfevents.<10-digit seconds>.<host>.<pid>.<counter>
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string name = files[0].filename().string();
  const std::string middle = "." + std::string(host) + "." + std::to_string(::getpid()) + ".";
  ASSERT_GT(name.size(), 30u);
  const std::string seconds = name.substr(20, 10);
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << name;
  EXPECT_NEAR(std::stod(seconds), before, 2.0) << name;
  EXPECT_EQ(name.substr(30, middle.size()), middle) << name;
  EXPECT_FALSE(name.substr(30 + middle.size()).empty()) << name;
  EXPECT_EQ(name.substr(30 + middle.size()).find_first_not_of("0123456789"), std::string::npos) << name;

  const Decoded d = decode(files[0]);
  ASSERT_EQ(d.rc, 0) << d.output;
  const std::vector<std::string> expected = {
      "file_version brain.Event:2",
      scalar(0, "hp_metric", -1),
      "hparams experiment hparam amsgrad DATA_TYPE_BOOL",
      "hparams experiment hparam bias DATA_TYPE_BOOL",
      "hparams experiment hparam hidden DATA_TYPE_FLOAT64",
      "hparams experiment hparam lr DATA_TYPE_FLOAT64",
      "hparams experiment hparam optimizer DATA_TYPE_STRING",
      "hparams experiment hparam run DATA_TYPE_STRING",
      "hparams experiment hparam shift DATA_TYPE_FLOAT64",
      "hparams experiment hparam width DATA_TYPE_STRING",
      "hparams experiment metric hp_metric",
      "hparams session_start_info amsgrad bool true",
      "hparams session_start_info bias bool false",
      "hparams session_start_info hidden number " + g17(256),
      "hparams session_start_info lr number " + g17(1e-07),
      "hparams session_start_info optimizer string adam w",
      "hparams session_start_info run string 7a",
      "hparams session_start_info shift number " + g17(-2.5),
      "hparams session_start_info width string 8",
      "hparams session_end_info STATUS_SUCCESS",
      scalar(3, "tiny", 1e-8),
      scalar(3, "train_loss", 0.1234567891),
      scalar(7, "val/acc", 2.0 / 3.0),
      scalar(int64_t{1} << 40, "huge", -2.5e30),
  };
  EXPECT_EQ(d.lines, expected) << d.output;
  // wall_time (a fixed64 double) is the time of writing.
  EXPECT_GE(d.first_wall_time, before) << d.output;
  EXPECT_LE(d.last_wall_time, after) << d.output;
  EXPECT_LE(d.first_wall_time, d.last_wall_time);

  // hparams.yaml beside it, as CSVLogger writes it.
  const std::string yaml = read_bytes(version0 / lt::TensorBoardLogger::kHparamsFile);
  EXPECT_NE(yaml.find("lr: 1.0e-07\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("optimizer: adam w\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("width: '8'\n"), std::string::npos) << yaml;
}

TEST_F(TensorBoardLoggerTest, WithoutDefaultHpMetricTheExperimentHasNoMetric) {
  ASSERT_NO_FATAL_FAILURE(require_checker());
  lt::TensorBoardLogger logger(lt::TensorBoardLoggerOptions(dir_.string()).default_hp_metric(false));
  logger.log_hyperparams({{"width", 8}});
  logger.save();
  const Decoded d = decode(logger.events_file());
  ASSERT_EQ(d.rc, 0) << d.output;
  EXPECT_EQ(d.lines, (std::vector<std::string>{"file_version brain.Event:2",
                                                "hparams experiment hparam width DATA_TYPE_FLOAT64",
                                                "hparams session_start_info width number " + g17(8),
                                                "hparams session_end_info STATUS_SUCCESS"}))
      << d.output;
}

TEST_F(TensorBoardLoggerTest, CheckerDetectsACorruptedOrTruncatedFile) {
  ASSERT_NO_FATAL_FAILURE(require_checker());
  lt::TensorBoardLogger logger(lt::TensorBoardLoggerOptions(dir_.string()));
  for (int64_t step = 1; step <= 3; ++step) logger.log_metrics({{"loss", 1.0 / static_cast<double>(step)}}, step);
  logger.save();
  const fs::path file = logger.events_file();
  const std::string good = read_bytes(file);
  ASSERT_EQ(decode(file).rc, 0) << decode(file).output;
  // Record i starts at offsets[i]: 8 bytes of length, 4 of CRC, the data, 4 of CRC.
  std::vector<size_t> offsets;
  for (size_t at = 0; at + 12 <= good.size();) {
    offsets.push_back(at);
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(good[at + i]);
    at += 12 + length + 4;
  }
  ASSERT_EQ(offsets.size(), 4u) << "file_version and three scalars";

  auto expect_rejected = [&](const std::string& bytes, const std::string& what) {
    const fs::path bad = dir_ / "bad.tfevents";
    write_bytes(bad, bytes);
    const Decoded d = decode(bad);
    EXPECT_EQ(d.rc, 1) << what << "\n" << d.output;
    EXPECT_NE(d.output.find(what), std::string::npos) << d.output;
  };
  std::string flipped = good;
  flipped[offsets[2] + 12 + 5] ^= 0x01;  // one bit of the second scalar's Event
  expect_rejected(flipped, "record 2 at byte " + std::to_string(offsets[2]) + ": data CRC mismatch");
  flipped = good;
  flipped[offsets[1]] ^= 0x40;  // the first scalar's length
  expect_rejected(flipped, "record 1 at byte " + std::to_string(offsets[1]) + ": length CRC mismatch");
  flipped = good;
  flipped[offsets[3] - 1] ^= 0x80;  // the stored CRC itself
  expect_rejected(flipped, "record 2 at byte " + std::to_string(offsets[2]) + ": data CRC mismatch");
  expect_rejected(good.substr(0, good.size() - 1), "record 3 at byte " + std::to_string(offsets[3]) + ": truncated");
}

TEST_F(TensorBoardLoggerTest, NothingIsCreatedBeforeTheFirstWrite) {
  const fs::path save_dir = dir_ / "logs";
  {
    lt::TensorBoardLogger logger(lt::TensorBoardLoggerOptions(save_dir.string()).flush_logs_every_n_steps(2));
    EXPECT_EQ(logger.log_dir(), (save_dir / "lightning_logs" / "version_0").string());
    EXPECT_EQ(logger.state_dict().at("version").toInt(), 0);
    EXPECT_EQ(logger.state_dict().at("step").toInt(), -1);
    EXPECT_TRUE(logger.events_file().empty());
    logger.save();
    logger.finalize("success");
  }
  EXPECT_FALSE(fs::exists(save_dir)) << "a logger that logged nothing left a trace";

  // Buffered: nothing on disk until flush_logs_every_n_steps log calls.
  lt::TensorBoardLogger logger(lt::TensorBoardLoggerOptions(save_dir.string()).flush_logs_every_n_steps(2));
  logger.log_metrics({{"loss", 1.0}}, 1);
  EXPECT_FALSE(logger.events_file().empty());
  EXPECT_FALSE(fs::exists(save_dir)) << "written before flush_logs_every_n_steps log calls";
  logger.log_metrics({{"loss", 0.5}}, 2);
  ASSERT_TRUE(fs::exists(logger.events_file()));
  const auto two_calls = fs::file_size(logger.events_file());
  logger.log_metrics({{"loss", 0.25}}, 3);
  EXPECT_EQ(fs::file_size(logger.events_file()), two_calls);
  logger.save();
  EXPECT_GT(fs::file_size(logger.events_file()), two_calls);
  EXPECT_EQ(logger.state_dict().at("step").toInt(), 3);

  // flush_secs 0: every log call is written at once.
  lt::TensorBoardLogger timed(lt::TensorBoardLoggerOptions((dir_ / "timed").string()).flush_secs(0));
  timed.log_metrics({{"loss", 1.0}}, 1);
  EXPECT_TRUE(fs::exists(timed.events_file()));
}

TEST_F(TensorBoardLoggerTest, BadOptionsAreRejectedNamingTheOption) {
  auto message = [](const lt::TensorBoardLoggerOptions& o) {
    try {
      lt::TensorBoardLogger logger(o);
    } catch (const lt::ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(lt::TensorBoardLoggerOptions().flush_logs_every_n_steps(0))
                .find("TensorBoardLogger: flush_logs_every_n_steps must be >= 1, got 0"),
            std::string::npos);
  EXPECT_NE(message(lt::TensorBoardLoggerOptions().version(-1)).find("TensorBoardLogger: version must be >= 0, got -1"),
            std::string::npos);
  EXPECT_NE(message(lt::TensorBoardLoggerOptions().name("")).find("TensorBoardLogger: name must not be empty"),
            std::string::npos);
  EXPECT_NE(message(lt::TensorBoardLoggerOptions().flush_secs(-1)).find("flush_secs must be >= 0, got -1"),
            std::string::npos);
}

TEST_F(TensorBoardLoggerTest, VersionsAreChosenAsCSVLoggerChoosesThem) {
  const fs::path root = dir_ / "lightning_logs";
  fs::create_directories(root / "version_0");
  fs::create_directories(root / "version_3");
  fs::create_directories(root / "version_x");
  write_bytes(root / "version_9", "a file, not a version folder");
  const std::string earlier = "not TensorBoard's: left as it is";
  write_bytes(root / "version_3" / "events.out.tfevents.1.earlier", earlier);

  lt::TensorBoardLogger next(lt::TensorBoardLoggerOptions(dir_.string()));
  EXPECT_EQ(next.version(), 4);
  EXPECT_EQ(next.version(), lt::CSVLogger(lt::CSVLoggerOptions(dir_.string())).version());
  EXPECT_EQ(lt::TensorBoardLogger(lt::TensorBoardLoggerOptions(dir_.string()).version(1)).version(), 1);

  // A resumed run writes a new events file in the newest version folder.
  lt::TensorBoardLogger resumed(lt::TensorBoardLoggerOptions(dir_.string()).flush_secs(0));
  resumed.continue_previous();
  EXPECT_EQ(resumed.version(), 3);
  resumed.log_metrics({{"loss", 1.0}}, 1);
  EXPECT_EQ(fs::path(resumed.events_file()).parent_path(), root / "version_3");
  EXPECT_EQ(events_files(root / "version_3").size(), 2u);
  EXPECT_EQ(read_bytes(root / "version_3" / "events.out.tfevents.1.earlier"), earlier);

  // Two loggers of one process in one second write two files.
  lt::TensorBoardLogger again(lt::TensorBoardLoggerOptions(dir_.string()).version(3).flush_secs(0));
  again.log_metrics({{"loss", 1.0}}, 1);
  EXPECT_NE(again.events_file(), resumed.events_file());
  EXPECT_EQ(events_files(root / "version_3").size(), 3u);

  lt::TensorBoardLogger first(lt::TensorBoardLoggerOptions((dir_ / "empty").string()));
  first.continue_previous();
  EXPECT_EQ(first.version(), 0) << "continue_previous with no version folder";
}

TEST_F(TensorBoardLoggerTest, RestoredStateHidesTheStepsLoggedAfterTheCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(require_checker());
  lt::StateDict checkpoint = lt::new_state_dict();
  {
    lt::TensorBoardLogger crashed(lt::TensorBoardLoggerOptions(dir_.string()).flush_secs(0));
    for (int64_t step = 1; step <= 5; ++step) {
      crashed.log_metrics({{"loss", static_cast<double>(step)}}, step);
      if (step == 3) checkpoint = crashed.state_dict();
    }
  }
  EXPECT_EQ(checkpoint.at("step").toInt(), 3);

  lt::TensorBoardLogger resumed(lt::TensorBoardLoggerOptions(dir_.string()).flush_secs(0));
  resumed.continue_previous();
  resumed.load_state_dict(checkpoint);
  EXPECT_EQ(resumed.state_dict().at("step").toInt(), 3);
  resumed.log_metrics({{"loss", 40.0}}, 4);
  const Decoded d = decode(resumed.events_file());
  ASSERT_EQ(d.rc, 0) << d.output;
  // PyTorch's SummaryWriter(purge_step=4) writes the same: TensorBoard drops
  // steps >= 4 of the run's earlier events files.
  EXPECT_EQ(d.lines,
            (std::vector<std::string>{"file_version brain.Event:2", "session_log 4 START", scalar(4, "loss", 40)}))
      << d.output;

  // A checkpoint of another version purges nothing in this one.
  lt::TensorBoardLogger other(lt::TensorBoardLoggerOptions(dir_.string()).version(7).flush_secs(0));
  other.load_state_dict(checkpoint);
  EXPECT_TRUE(other.events_file().empty());
  other.log_metrics({{"loss", 1.0}}, 1);
  const Decoded o = decode(other.events_file());
  ASSERT_EQ(o.rc, 0) << o.output;
  EXPECT_EQ(o.lines, (std::vector<std::string>{"file_version brain.Event:2", scalar(1, "loss", 1)})) << o.output;
}

TEST_F(TensorBoardLoggerTest, AFailedWriteNamesTheFileAndKeepsTheRecords) {
  ASSERT_NO_FATAL_FAILURE(require_checker());
  // save_dir under a regular file: the folder cannot be made.
  write_bytes(dir_ / "plain", "x");
  lt::TensorBoardLogger blocked(lt::TensorBoardLoggerOptions((dir_ / "plain").string()));
  try {
    blocked.log_hyperparams({{"lr", "0.1"}});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "plain").string()), std::string::npos) << e.what();
  }

  lt::TensorBoardLogger logger(lt::TensorBoardLoggerOptions(dir_.string()));
  logger.log_metrics({{"loss", 0.5}}, 1);
  fs::create_directories(logger.events_file());  // the file's name taken by a folder
  try {
    logger.save();
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + logger.events_file() + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("Is a directory"), std::string::npos) << what;
  }
  fs::remove(logger.events_file());
  logger.log_metrics({{"loss", 0.25}}, 2);
  logger.save();
  const Decoded d = decode(logger.events_file());
  ASSERT_EQ(d.rc, 0) << d.output;
  EXPECT_EQ(d.lines, (std::vector<std::string>{"file_version brain.Event:2", scalar(1, "loss", 0.5),
                                                scalar(2, "loss", 0.25)}))
      << d.output;
}

TEST_F(TensorBoardLoggerTest, RegisteredWithTheTrainersRootDirAsDefault) {
  lt::Registry r;
  lt::register_builtins(r);
  const auto& entry = r.get<lt::Logger>("TensorBoardLogger");
  const lt::TrainerOptions trainer = lt::TrainerOptions().default_root_dir(dir_.string());
  auto logger = entry.factory(lt::default_init_args(entry.schema, &trainer));
  EXPECT_EQ(logger->log_dir(), (dir_ / "lightning_logs" / "version_0").string());
  EXPECT_EQ(logger->name(), "lightning_logs");
  ASSERT_NE(dynamic_cast<lt::TensorBoardLogger*>(logger.get()), nullptr);
  EXPECT_FALSE(fs::exists(dir_ / "lightning_logs"));
}

}  // namespace
