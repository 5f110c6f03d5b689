// plugins/io's archive of a checkpoint (pickle_archive, zip_writer,
// torch_plugin) in a training binary: a save writes the bytes LibTorch's own
// writer writes (torch::jit::writeArchiveAndTensors over
// PyTorchStreamWriter, the oracle), zip64 past 4 GiB included; placeholders
// are written as their values arrive (read back by Python's torch.load); a
// load maps the file copy-on-write.
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/version.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>

#include "support/checkpoint_fixture.h"
#include "support/multiprocess.h"

using lt::testing::read_file;
using namespace lt::testing;  // kPython, Reference, data, expect_same_weights (support/checkpoint_fixture.h)

namespace fs = std::filesystem;

namespace {

// A save writes the bytes LibTorch's own writer writes (torch::pickle_save:
// PyTorchStreamWriter over miniz), for values with no tensor, many tensors,
// storages shared by views, odd sizes, integer and bool dtypes, a large one; an empty
// storage goes through LibTorch's writer, the same bytes again.
// What LibTorch's own writer makes of `value` (torch::jit::writeArchiveAndTensors), pickled as lightning-cpp
// pickles it (untagged, for Python's weights_only loading).
void libtorch_archive(const c10::IValue& value, const std::function<void(const void*, size_t)>& sink) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* d, size_t n) { pickle.insert(pickle.end(), d, d + n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* d, size_t n) -> size_t {
    sink(d, n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
}

// LibTorch 2.x's writer ends an archive with two records that 1.13's does not
// write and readers do not need (byteorder, .data/serialization_id): our
// records, all that comes before our central directory, are compared with
// the same bytes of LibTorch's archive.
bool same_records(const std::string& ours, const std::string& theirs) {
  const size_t records = ours.find(std::string("PK\x01\x02", 4));
  return records != std::string::npos && theirs.compare(0, records, ours, 0, records) == 0;
}

// Where two archives first differ, with the bytes around it (the archives themselves are too long to print).
std::string first_difference(const std::string& a, const std::string& b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  if (at == a.size() && at == b.size()) return "equal";
  const size_t from = at < 48 ? 0 : at - 48;
  std::ostringstream out;
  out << "sizes " << a.size() << " and " << b.size() << "; first difference at byte " << at << ": ...";
  c10::printQuotedString(out, a.substr(from, 96));
  out << " vs ...";
  c10::printQuotedString(out, b.substr(from, 96));
  return out.str();
}

TEST_F(CheckpointTest, ASaveWritesTheBytesOfLibTorchsWriter) {
  torch::manual_seed(3);
  c10::Dict<std::string, torch::Tensor> many;
  for (int i = 0; i < 40; ++i) many.insert("w" + std::to_string(i), torch::randn({i * 7 + 1}));
  const torch::Tensor base = torch::arange(100, torch::kFloat32);
  c10::Dict<std::string, torch::Tensor> views;
  views.insert("a", base.slice(0, 10, 30));
  views.insert("b", base.view({10, 10}).t());
  views.insert("c", torch::randint(0, 1000, {33}, torch::kLong));
  views.insert("d", torch::rand({17}) > 0.5);
  views.insert("large", torch::randn({3 << 20}));  // 12 MiB: its CRC taken on a second thread
  c10::impl::GenericDict nested(c10::StringType::get(), c10::AnyType::get());
  nested.insert("state_dict", many);
  nested.insert("epoch", int64_t{3});
  nested.insert("name", std::string(300, 'x'));
  c10::Dict<std::string, torch::Tensor> empty;
  empty.insert("e", torch::empty({0}));
  empty.insert("f", torch::ones({3}));
  const std::vector<c10::IValue> values = {c10::IValue(int64_t{1}), c10::IValue(many), c10::IValue(views),
                                           c10::IValue(nested), c10::IValue(empty)};
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string path = (dir_ / ("bytes" + std::to_string(i) + ".pt")).string();
    lt::atomic_pickle_save(values[i], path);
    std::ifstream in(path, std::ios::binary);
    const std::string ours((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string theirs;
    libtorch_archive(values[i], [&](const void* d, size_t n) { theirs.append(static_cast<const char*>(d), n); });
    EXPECT_TRUE(same_records(ours, theirs))
        << "value " << i << ": " << first_difference(ours, theirs);
#if TORCH_VERSION_MAJOR < 2
    EXPECT_EQ(ours, theirs) << "value " << i;
#endif
  }
}

// A record of 4 GiB or more, and the records after it (past 4 GiB), carry
// miniz's zip64 fields: the archive of a 4 GiB + 100 byte tensor between two
// small ones is, byte for byte, what LibTorch's writer writes. Compared
// without the large record's bytes (zeros of a mapping that takes no memory;
// their CRC is in the compared bytes), so that the test holds no 4 GiB.
TEST_F(CheckpointTest, ARecordOf4GiBHasMinizsZip64FieldsAndBytes) {
  const size_t big = (size_t{1} << 32) + 100;
  void* zeros = ::mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(zeros, MAP_FAILED);
  const char* begin = static_cast<const char*>(zeros);
  c10::Dict<std::string, torch::Tensor> value;
  value.insert("a", torch::arange(3, torch::kFloat32));
  value.insert("big", torch::from_blob(zeros, {static_cast<int64_t>(big)}, torch::kUInt8));
  value.insert("c", torch::arange(5, torch::kLong));
  struct Kept {
    std::string bytes;  // all but the large record's
    uint64_t total = 0;
  };
  auto keep = [begin, big](Kept* kept) {
    return [kept, begin, big](const void* data, size_t size) {
      const char* p = static_cast<const char*>(data);
      if (p < begin || p >= begin + big) kept->bytes.append(p, size);
      kept->total += size;
    };
  };
  Kept ours, theirs;
  lt::write_pickle_archive(value, keep(&ours));
  libtorch_archive(value, keep(&theirs));
  ::munmap(zeros, big);
  EXPECT_GT(ours.total, big);
  EXPECT_TRUE(same_records(ours.bytes, theirs.bytes))
      << first_difference(ours.bytes, theirs.bytes);
#if TORCH_VERSION_MAJOR < 2
  EXPECT_EQ(ours.total, theirs.total);
  EXPECT_EQ(ours.bytes, theirs.bytes);
#endif
}

// A checkpoint's placeholders (a sharding strategy's tensors held in chunks)
// are written as their values arrive: the file reads back as the dict with
// the values, in C++ and with Python's torch.load. A placeholder given no
// value is an error and leaves the old file; a failing write is thrown only
// once every value was handed over (the handing over is a collective).
TEST_F(CheckpointTest, PlaceholdersAreWrittenAsTheirValuesArrive) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({3, 4}), z = torch::arange(5, torch::kLong);
  const torch::Tensor px = lt::deferred_tensor({3, 4}, torch::kFloat32), pz = lt::deferred_tensor({5}, torch::kLong);
  EXPECT_TRUE(lt::is_deferred(px) && lt::is_deferred(pz));
  EXPECT_FALSE(lt::is_deferred(x));
  EXPECT_FALSE(lt::is_deferred(lt::deferred_tensor({0, 4}, torch::kFloat32)));  // nothing to defer
  c10::Dict<std::string, torch::Tensor> state;
  state.insert("x", px);
  state.insert("y", torch::ones({2}));
  state.insert("z", pz);
  const std::string path = (dir_ / "deferred.pt").string();
  int calls = 0;
  lt::atomic_pickle_save(state, path, [&](const lt::DeferredWrite& write) {
    ++calls;
    write(pz, z);
    write(px, x);
  });
  EXPECT_EQ(calls, 1);
  const auto loaded = lt::pickle_load_file(path).toGenericDict();
  EXPECT_TRUE(loaded.at("x").toTensor().equal(x));
  EXPECT_TRUE(loaded.at("y").toTensor().equal(torch::ones({2})));
  EXPECT_TRUE(loaded.at("z").toTensor().equal(z));
  const std::string python = std::string(kPython) +
                             " -c \"import torch, sys; d = torch.load(sys.argv[1]); "
                             "assert list(d) == ['x', 'y', 'z'] and d['x'].shape == (3, 4) and "
                             "d['z'].tolist() == [0, 1, 2, 3, 4], d\" " + path;
  EXPECT_EQ(std::system(python.c_str()), 0) << python;
  const std::string before = read_file(path);
  EXPECT_THROW(lt::atomic_pickle_save(state, path, [&](const lt::DeferredWrite& write) { write(pz, z); }), lt::Error);
  EXPECT_EQ(read_file(path), before);
  int handed = 0;
  auto failing = [&](const void* data, size_t /*size*/) {  // fails at x's bytes, after z's record
    if (data == x.data_ptr()) throw std::runtime_error("disk full");
  };
  try {
    lt::write_pickle_archive(state, failing, [&](const lt::DeferredWrite& write) {
      write(pz, z);
      ++handed;
      write(px, x);
      ++handed;
    });
    ADD_FAILURE() << "the failing write was not thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  EXPECT_EQ(handed, 2);
}

// A load maps the file: its tensors are copy-on-write views of the file's
// pages (shared, and dropped by the kernel under pressure), not the
// process's own memory. Loading a 64 MB checkpoint adds far less than that
// to the process's own (anonymous) memory while it is held; a loaded tensor
// changed in place changes neither the file nor a second load of it.
TEST_F(CheckpointTest, ALoadMapsTheFileCopyOnWrite) {
  auto status_kb = [](const std::string& key) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
    }
    return 0LL;
  };
  torch::manual_seed(1);
  c10::Dict<std::string, torch::Tensor> state;
  for (int i = 0; i < 4; ++i) state.insert("w" + std::to_string(i), torch::randn({4 << 20}));  // 16 MB each
  const std::string path = (dir_ / "mapped.pt").string();
  lt::atomic_pickle_save(state, path);
  const std::string bytes = read_file(path);
  const long long before = status_kb("RssAnon");
  c10::IValue loaded = lt::pickle_load_file(path);
  const long long added = status_kb("RssAnon") - before;
  EXPECT_LT(added, 16 * 1024) << "kB of the process's own memory for a 64 MB checkpoint";
  torch::Tensor w0 = loaded.toGenericDict().at("w0").toTensor();
  EXPECT_TRUE(w0.equal(state.at("w0")));
  w0.add_(1);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_TRUE(lt::pickle_load_file(path).toGenericDict().at("w0").toTensor().equal(state.at("w0")));
}

}  // namespace
