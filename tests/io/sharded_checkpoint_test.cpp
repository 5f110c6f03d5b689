// plugins/io/sharded_checkpoint.h: a sharded checkpoint's folder, made here
// as two ranks would make it: meta.pt places each placeholder's value in the
// rank files, a load reads it from them (whole, or a part at a time), a new
// save removes the files of the one before, and a missing or damaged rank
// file is an error naming it.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/plugins/io/sharded_checkpoint.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>

#include "io/io_fixture.h"

namespace fs = std::filesystem;

namespace {

struct ShardedCheckpointTest : lt::testing::IoTest {
  // Two ranks' files of the save `token`: part 0 is 0..7 end to end (rank 0:
  // 0..3, rank 1: 4..7), part 1 is 10..14 (rank 0: 10, 11; rank 1: 12..14).
  // w (2x3) lies at part 0's elements [1, 7), across both files; v (2) at
  // part 1's [3, 5), inside rank 1's.
  std::vector<std::string> save(const std::string& dir, uint64_t token) {
    fs::create_directories(dir);
    const std::vector<std::string> files = {lt::shard_file_name(0, 2, token), lt::shard_file_name(1, 2, token)};
    lt::atomic_pickle_save(c10::ivalue::Tuple::create({torch::arange(0, 4, torch::kFloat32),
                                                        torch::tensor({10.0f, 11.0f})}),
                           (fs::path(dir) / files[0]).string());
    lt::atomic_pickle_save(c10::ivalue::Tuple::create({torch::arange(4, 8, torch::kFloat32),
                                                        torch::tensor({12.0f, 13.0f, 14.0f})}),
                           (fs::path(dir) / files[1]).string());
    const torch::Tensor w = lt::deferred_tensor({2, 3}, torch::kFloat32), v = lt::deferred_tensor({2}, torch::kFloat32);
    c10::impl::GenericDict value(c10::StringType::get(), c10::AnyType::get());
    value.insert("w", w);
    value.insert("v", v);
    value.insert("b", torch::tensor({7.5f}));
    value.insert("epoch", int64_t{3});
    lt::write_sharded_meta(value, dir, files, {{w, 0, 1}, {v, 1, 3}});
    return files;
  }
  static torch::Tensor expected_w() { return torch::arange(1, 7, torch::kFloat32).view({2, 3}); }
};

TEST_F(ShardedCheckpointTest, ReadsEachValueFromWhereMetaPlacesIt) {
  const std::string dir = path("ckpt");
  save(dir, 1);
  EXPECT_TRUE(lt::is_sharded_checkpoint(dir));
  const auto loaded = lt::pickle_load_file(dir).toGenericDict();
  EXPECT_TRUE(loaded.at("w").toTensor().equal(expected_w())) << loaded.at("w").toTensor();
  EXPECT_TRUE(loaded.at("v").toTensor().equal(torch::tensor({13.0f, 14.0f}))) << loaded.at("v").toTensor();
  EXPECT_TRUE(loaded.at("b").toTensor().equal(torch::tensor({7.5f})));
  EXPECT_EQ(loaded.at("epoch").toInt(), 3);
  EXPECT_NO_THROW(lt::check_checkpoint_file(dir));
}

TEST_F(ShardedCheckpointTest, WithPlaceholdersAValueIsReadAPartAtATime) {
  const std::string dir = path("ckpt");
  save(dir, 1);
  const auto loaded = lt::pickle_load_file(dir, /*placeholders=*/true).toGenericDict();
  const torch::Tensor w = loaded.at("w").toTensor();
  ASSERT_TRUE(lt::is_deferred(w));
  EXPECT_FALSE(lt::is_deferred(loaded.at("b").toTensor()));  // a record of meta.pt itself
  torch::Tensor part = torch::zeros({3});
  lt::copy_elements(w, 2, part);  // w's elements 2, 3, 4
  EXPECT_TRUE(part.equal(torch::tensor({3.0f, 4.0f, 5.0f}))) << part;
  EXPECT_TRUE(lt::materialized(w).equal(expected_w()));
  EXPECT_TRUE(lt::materialized(loaded.at("v").toTensor()).equal(torch::tensor({13.0f, 14.0f})));
}

TEST_F(ShardedCheckpointTest, ANewSaveRemovesTheRankFilesOfTheOneBefore) {
  const std::string dir = path("ckpt");
  const std::vector<std::string> first = save(dir, 1);
  write_bytes((fs::path(dir) / "notes.txt").string(), "kept");
  const std::vector<std::string> second = save(dir, 2);
  for (const std::string& file : first) EXPECT_FALSE(fs::exists(fs::path(dir) / file)) << file;
  for (const std::string& file : second) EXPECT_TRUE(fs::exists(fs::path(dir) / file)) << file;
  EXPECT_TRUE(fs::exists(fs::path(dir) / "notes.txt"));
  EXPECT_TRUE(lt::pickle_load_file(dir).toGenericDict().at("w").toTensor().equal(expected_w()));
}

TEST_F(ShardedCheckpointTest, AMissingRankFileIsAnErrorNamingIt) {
  const std::string dir = path("ckpt");
  const std::vector<std::string> files = save(dir, 1);
  fs::remove(fs::path(dir) / files[1]);
  EXPECT_THROW(lt::pickle_load_file(dir), lt::ValueError);
  EXPECT_THROW(lt::check_checkpoint_file(dir), lt::ValueError);
  // With placeholders the file is first needed when a value is read: the
  // error is then the reader's own, whole (a load's is cut at 200 characters).
  const auto loaded = lt::pickle_load_file(dir, /*placeholders=*/true).toGenericDict();
  try {
    lt::materialized(loaded.at("w").toTensor());
    ADD_FAILURE() << "a value was read from a missing rank file";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + files[1] + "', which is missing"), std::string::npos) << e.what();
  }
}

TEST_F(ShardedCheckpointTest, ADamagedRankFileFailsTheCheck) {
  const std::string dir = path("ckpt");
  const std::vector<std::string> files = save(dir, 1);
  const std::string rank1 = (fs::path(dir) / files[1]).string();
  std::string bytes = bytes_of(rank1);
  const torch::Tensor values = torch::arange(4, 8, torch::kFloat32);
  const size_t at = bytes.find(std::string(static_cast<const char*>(values.data_ptr()), 16));
  ASSERT_NE(at, std::string::npos);
  bytes[at + 5] ^= 0x10;
  write_bytes(rank1, bytes);
  try {
    lt::check_checkpoint_file(dir);
    ADD_FAILURE() << "a damaged rank file passed the check";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(files[1]), std::string::npos) << e.what();
  }
}

TEST_F(ShardedCheckpointTest, OnlyAFolderWithMetaIsOne) {
  EXPECT_FALSE(lt::is_sharded_checkpoint(dir_.string()));  // a folder, no meta.pt
  EXPECT_FALSE(lt::is_sharded_checkpoint(path("missing")));
  lt::atomic_pickle_save(c10::IValue(int64_t{1}), path("file.pt"));
  EXPECT_FALSE(lt::is_sharded_checkpoint(path("file.pt")));
  EXPECT_EQ(lt::shard_file_name(1, 4, 0xabc), "shard_1_of_4-0000000000000abc.pt");
}

}  // namespace
