#include <lightning_cpp/plugins/io/sharded_checkpoint.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <unordered_map>
#include <utility>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/deferred_tensor.h>
#include <lightning_cpp/core/files.h>
#include <lightning_cpp/plugins/io/checked_reader.h>
#include <lightning_cpp/plugins/io/pickle_archive.h>
#include <lightning_cpp/plugins/io/torch_plugin.h>

namespace lt {

namespace {

constexpr const char* kMetaFile = "meta.pt";
// meta.pt's record that places the placeholders: {"files": [str], "places": {key: (part, offset, numel)}}.
constexpr const char* kShardedRecord = "sharded.pkl";

}  // namespace

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(
                                                        std::filesystem::path(path) / kMetaFile, ec);
}

std::string shard_file_name(int64_t rank, int64_t world_size, uint64_t token) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(token));
  return c10::str("shard_", rank, "_of_", world_size, "-", hex, ".pt");
}

void write_sharded_meta(const c10::IValue& value, const std::string& dir, const std::vector<std::string>& files,
                        const std::vector<ShardedPlace>& places) {
  namespace fs = std::filesystem;
  auto table = [&](const detail::PlaceholderRecords& placeholders) {
    c10::impl::GenericDict placed(c10::StringType::get(), c10::AnyType::get());
    for (const ShardedPlace& place : places) {
      auto it = placeholders.find(place.placeholder.storage().unsafeGetStorageImpl());
      LT_INTERNAL_ASSERT(it != placeholders.end(), "write_sharded_meta: a place for no placeholder of the checkpoint");
      placed.insert(std::to_string(it->second), c10::ivalue::Tuple::create(place.part, place.offset,
                                                                            place.placeholder.numel()));
    }
    LT_INTERNAL_ASSERT(placed.size() == placeholders.size(), "write_sharded_meta: ", placeholders.size(),
                       " placeholders and ", placed.size(), " places");
    c10::impl::GenericDict layout(c10::StringType::get(), c10::AnyType::get());
    layout.insert("files", c10::List<std::string>(files));
    layout.insert("places", placed);
    return detail::ExtraRecord{kShardedRecord, torch::jit::pickle(layout)};
  };
  FileReplacement file((fs::path(dir) / kMetaFile).string());
  detail::write_archive(value, [&](const void* data, size_t size) { file.write(data, size); }, {}, table);
  file.commit();
  // The rank files of earlier saves (no meta.pt names them now).
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard_", 0) == 0 && entry.path().extension() == ".pt" &&
        std::find(files.begin(), files.end(), name) == files.end()) {
      fs::remove(entry.path(), ec);
    }
  }
}

namespace {

using detail::CheckedReader;
using detail::load_archive;

// A sharded checkpoint's table (write_archive's kShardedRecord): the rank
// files, and each placeholder record's (part, offset, numel).
struct ShardedTable {
  std::vector<std::string> files;
  std::unordered_map<std::string, std::array<int64_t, 3>> places;
};
ShardedTable sharded_table(const std::shared_ptr<CheckedReader>& meta) {
  ShardedTable table;
  caffe2::serialize::PyTorchStreamReader reader(meta);
  if (!reader.hasRecord(kShardedRecord)) return table;  // no placeholders (a NO_SHARD run's)
  const auto [data, size] = reader.getRecord(kShardedRecord);
  if (!meta->problem().empty()) meta->corrupt(meta->problem());
  try {
    const c10::IValue value = torch::jit::unpickle(static_cast<const char*>(data.get()), size);
    const auto dict = value.toGenericDict();
    for (const auto& file : dict.at("files").toListRef()) table.files.push_back(file.toStringRef());
    for (const auto& place : dict.at("places").toGenericDict()) {
      const auto& t = place.value().toTupleRef().elements();
      table.places[place.key().toStringRef()] = {t.at(0).toInt(), t.at(1).toInt(), t.at(2).toInt()};
    }
  } catch (const std::exception& e) {
    meta->corrupt(c10::str("its record '", kShardedRecord, "' is damaged: ", error_message(e).substr(0, 200)));
  }
  return table;
}

// Rank file `name` of the sharded checkpoint `dir`, which must exist.
std::string rank_file(const std::string& dir, const std::string& name) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  LT_CHECK_VALUE(std::filesystem::exists(path), "sharded checkpoint '", dir, "': its meta.pt names the file '", name,
                 "', which is missing (a folder copied in part, or a rank file removed)");
  return path;
}

// A sharded checkpoint's rank files, each read (mapped, its records
// CRC-checked) when a value first needs it.
class RankFiles {
 public:
  RankFiles(std::string dir, std::vector<std::string> files) : dir_(std::move(dir)), files_(std::move(files)) {
    parts_.resize(files_.size());
  }

  // Elements [offset, offset + numel) of the parts `part` of the files end
  // to end, as a view of one file where they lie in one part, else undefined.
  torch::Tensor view(int64_t part, int64_t offset, int64_t numel) {
    int64_t start = 0;
    for (size_t r = 0; r < files_.size(); ++r) {
      const torch::Tensor& t = part_of(r, part);
      if (offset >= start && offset + numel <= start + t.numel()) return t.narrow(0, offset - start, numel);
      if (start + t.numel() > offset) return {};
      start += t.numel();
    }
    return {};
  }

  // The dtype of the parts `part`.
  torch::TensorOptions options(int64_t part) { return part_of(0, part).options(); }

  // The same elements copied into `out` (contiguous, of the parts' dtype).
  void read(int64_t part, int64_t offset, const torch::Tensor& out) {
    const int64_t numel = out.numel();
    int64_t start = 0;
    for (size_t r = 0; r < files_.size() && start < offset + numel; ++r) {
      const torch::Tensor& t = part_of(r, part);
      LT_CHECK_VALUE(t.dtype() == out.dtype(), "sharded checkpoint '", dir_, "': part ", part, " of '", files_[r],
                     "' is ", t.dtype(), " where meta.pt has ", out.dtype());
      const int64_t from = std::max(offset, start), to = std::min(offset + numel, start + t.numel());
      if (from < to) out.narrow(0, from - offset, to - from).copy_(t.narrow(0, from - start, to - from));
      start += t.numel();
    }
    LT_CHECK_VALUE(start >= offset + numel, "sharded checkpoint '", dir_, "': the rank files' part ", part, " holds ",
                   start, " elements, and meta.pt places a value at elements [", offset, ", ", offset + numel, ")");
  }

 private:
  const torch::Tensor& part_of(size_t r, int64_t part) {
    if (parts_[r].empty()) {
      const c10::IValue loaded = pickle_load_file(rank_file(dir_, files_[r]));
      LT_CHECK_VALUE(loaded.isTuple(), "sharded checkpoint '", dir_, "': '", files_[r], "' holds no tuple of parts");
      for (const auto& t : loaded.toTupleRef().elements()) parts_[r].push_back(t.toTensor().contiguous().view(-1));
    }
    LT_CHECK_VALUE(part >= 0 && static_cast<size_t>(part) < parts_[r].size(), "sharded checkpoint '", dir_, "': '",
                   files_[r], "' has ", parts_[r].size(), " parts, and meta.pt places a value in part ", part);
    return parts_[r][static_cast<size_t>(part)];
  }

  std::string dir_;
  std::vector<std::string> files_;
  std::vector<std::vector<torch::Tensor>> parts_;
};

// Where the elements of a placeholder of a sharded checkpoint read with placeholders are.
class PlacedValue : public DeferredSource {
 public:
  PlacedValue(std::shared_ptr<RankFiles> files, int64_t part, int64_t offset)
      : files_(std::move(files)), part_(part), offset_(offset) {}
  void read(int64_t begin, const torch::Tensor& out) const override { files_->read(part_, offset_ + begin, out); }

 private:
  std::shared_ptr<RankFiles> files_;
  int64_t part_;
  int64_t offset_;
};

}  // namespace

namespace detail {

c10::IValue load_sharded(const std::string& dir, bool placeholders) {
  namespace fs = std::filesystem;
  auto meta = std::make_shared<CheckedReader>((fs::path(dir) / kMetaFile).string());
  const ShardedTable table = sharded_table(meta);
  auto files = std::make_shared<RankFiles>(dir, table.files);
  auto elsewhere = [&](const std::string& key) -> at::DataPtr {
    auto it = table.places.find(key);
    if (it == table.places.end()) {
      meta->corrupt(c10::str("record 'data/", key, "' is neither in it nor placed in a rank file"));
    }
    const auto [part, offset, numel] = it->second;
    if (placeholders) {
      return deferred_data(std::make_unique<PlacedValue>(files, part, offset), at::Device(at::kCPU));
    }
    torch::Tensor value = files->view(part, offset, numel);
    if (!value.defined()) {
      value = torch::empty({numel}, files->options(part));
      files->read(part, offset, value);
    }
    void* data = value.data_ptr();
    return at::DataPtr(data, new torch::Tensor(std::move(value)),
                       [](void* tensor) { delete static_cast<torch::Tensor*>(tensor); }, at::Device(at::kCPU));
  };
  return load_archive(meta, elsewhere);
}

void check_sharded(const std::string& path) {
  namespace fs = std::filesystem;
  auto meta = std::make_shared<CheckedReader>((fs::path(path) / kMetaFile).string());
  meta->check_the_rest();
  for (const std::string& file : sharded_table(meta).files) CheckedReader(rank_file(path, file)).check_the_rest();
}

}  // namespace detail

}  // namespace lt
