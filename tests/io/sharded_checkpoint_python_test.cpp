// plugins/io/sharded_checkpoint.h in a training binary: a sharded checkpoint
// made of its pieces in one process as two ranks would, its rank files read
// by Python's torch.load (the oracle), its placeholders read from them, a
// save killed before meta.pt leaving the previous checkpoint whole.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>

#include "support/checkpoint_fixture.h"
#include "support/multiprocess.h"

using lt::testing::read_file;
using namespace lt::testing;  // kPython, Reference, data, expect_same_weights (support/checkpoint_fixture.h)

namespace fs = std::filesystem;

namespace {

// A sharded checkpoint (checkpoint_io.h), made of its pieces in one process
// as two ranks would: each placeholder's value is read from the rank files
// (w: split across both ranks' part 0; v: inside rank 1's part 1), the rank
// files are tuples torch.load reads, a save killed before its meta.pt leaves
// the previous checkpoint whole and the next save removes its stray files,
// and a missing or damaged rank file is an error naming it.
TEST_F(CheckpointTest, AShardedCheckpointReadsItsPlaceholdersFromItsRankFilesAndIsReplacedWhole) {
  const std::string dir = (dir_ / "sharded.ckpt").string();
  fs::create_directories(dir);
  const torch::Tensor w = torch::arange(15, torch::kFloat).view({3, 5}), v = torch::tensor({7, 8, 9}, torch::kLong);
  const torch::Tensor pw = lt::deferred_tensor({3, 5}, torch::kFloat), pv = lt::deferred_tensor({3}, torch::kLong);
  c10::Dict<std::string, torch::Tensor> weights;
  weights.insert("w", pw);
  weights.insert("b", torch::ones({2}));
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("state_dict", weights);
  checkpoint.insert("v", pv);
  checkpoint.insert("global_step", int64_t{7});
  // Rank r's parts: w's flat values (padded to 16) in halves; v at element 1 of rank 1's part 1.
  auto save = [&](uint64_t token, const torch::Tensor& flat_w, const torch::Tensor& part1, bool meta) {
    std::vector<std::string> files;
    for (int64_t r = 0; r < 2; ++r) {
      files.push_back(lt::shard_file_name(r, 2, token));
      std::vector<c10::IValue> parts{flat_w.narrow(0, 8 * r, 8).clone(), r == 1 ? part1 : torch::zeros({2}, torch::kLong)};
      lt::atomic_pickle_save(c10::ivalue::Tuple::create(std::move(parts)), dir + "/" + files.back());
    }
    if (meta) lt::write_sharded_meta(checkpoint, dir, files, {{pw, 0, 0}, {pv, 1, 3}});
    return files;
  };
  auto loaded = [&] { return lt::pickle_load_file(dir).toGenericDict(); };
  const torch::Tensor flat = torch::cat({w.flatten(), torch::zeros({1})});
  const auto files = save(1, flat, torch::tensor({0, 7, 8, 9}, torch::kLong), /*meta=*/true);
  ASSERT_TRUE(lt::is_sharded_checkpoint(dir));
  EXPECT_FALSE(lt::is_sharded_checkpoint((dir_ / "no").string()));
  lt::check_checkpoint_file(dir);
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("w").toTensor().equal(w));
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("b").toTensor().equal(torch::ones({2})));
  EXPECT_TRUE(loaded().at("v").toTensor().equal(v));
  EXPECT_EQ(loaded().at("global_step").toInt(), 7);
  // Read with placeholders (a sharding strategy's load): the values stay in the rank files, and any range of
  // one is read from them (w's elements 6-9 span both files).
  {
    const auto lazy = lt::pickle_load_file(dir, /*placeholders=*/true).toGenericDict();
    const torch::Tensor lw = lazy.at("state_dict").toGenericDict().at("w").toTensor();
    ASSERT_TRUE(lt::is_deferred(lw));
    EXPECT_FALSE(lt::is_deferred(lazy.at("state_dict").toGenericDict().at("b").toTensor()));
    torch::Tensor range = torch::zeros({4}, torch::kDouble);  // cast on the way
    lt::copy_elements(lw, 6, range);
    EXPECT_TRUE(range.equal(torch::arange(6, 10, torch::kDouble)));
    EXPECT_TRUE(lt::materialized(lw).equal(w));
    EXPECT_TRUE(lt::materialized(lazy.at("v").toTensor()).equal(v));
  }
  const std::string python = std::string(kPython) +
                             " -c \"import torch, sys; t = torch.load(sys.argv[1]); "
                             "assert isinstance(t, tuple) and t[0].tolist() == list(range(8)), t\" " + dir + "/" +
                             files[0];
  EXPECT_EQ(std::system(python.c_str()), 0) << python;
  // Killed after the rank files, before meta.pt: the old checkpoint.
  save(2, flat + 100, torch::tensor({0, 1, 2, 3}, torch::kLong), /*meta=*/false);
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("w").toTensor().equal(w));
  const auto next = save(3, flat + 100, torch::tensor({0, 1, 2, 3}, torch::kLong), /*meta=*/true);
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("w").toTensor().equal(w + 100));
  EXPECT_TRUE(loaded().at("v").toTensor().equal(torch::tensor({1, 2, 3}, torch::kLong)));
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir)) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"meta.pt", next[0], next[1]}));
  // A damaged rank file (a byte of its first record's data, 64-byte aligned: at 64), then a missing one.
  {
    std::fstream f(dir + "/" + next[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(65);
    const char byte = static_cast<char>(f.get());
    f.seekp(65);
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  try {
    lt::check_checkpoint_file(dir);
    ADD_FAILURE() << "a damaged rank file passed the check";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(next[1]), std::string::npos) << e.what();
  }
  fs::remove(dir + "/" + next[1]);
  try {
    loaded();
    ADD_FAILURE() << "a missing rank file was not noticed";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("names the file '" + next[1] + "', which is missing"), std::string::npos)
        << e.what();
  }
}

}  // namespace
