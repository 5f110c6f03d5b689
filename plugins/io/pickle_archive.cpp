#include <lightning_cpp/plugins/io/pickle_archive.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/io/pickle_opcodes.h>

namespace lt::detail {

namespace {

// Tensors off the CPU (a GPU's), keyed by the CPU placeholder that stands
// for each one's storage in the pickle.
using OffCpu = std::unordered_map<const c10::StorageImpl*, torch::Tensor>;

// A placeholder on the CPU for `t`'s storage, viewed as `t` is: the pickle
// then names the CPU as the tensor's place, as torch.save would after
// .cpu(), and shares a storage among views as the original did.
torch::Tensor cpu_placeholder(const torch::Tensor& t, OffCpu& off_cpu,
                              std::unordered_map<const c10::StorageImpl*, torch::Tensor>& by_storage) {
  torch::Tensor& base = by_storage[t.storage().unsafeGetStorageImpl()];
  if (!base.defined()) {
    base = deferred_tensor({static_cast<int64_t>(t.storage().nbytes() / t.element_size())},
                           t.options().device(torch::kCPU));
    off_cpu.emplace(base.storage().unsafeGetStorageImpl(), t);
  }
  return base.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

// A tensor's whole storage, copied to the CPU: its record's bytes.
torch::Tensor storage_on_cpu(const torch::Tensor& t) {
  const int64_t n = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  return torch::empty({0}, t.options()).set_(t.storage(), 0, {n}, {1}).to(torch::kCPU);
}

// `value` with each list of ints, floats, bools or tensors made a generic
// list (the pickler writes those as plain pickle lists; the typed ones as a
// torch.jit._pickle.build_*list call) and each tensor what `tensor` makes
// of it (itself, or a placeholder); tensors are shared, not copied, and a
// container without lists or replaced tensors in it is `value` itself (the
// pickle is then byte for byte what LibTorch's writer makes of it, untagged).
c10::IValue plain_lists(const c10::IValue& value, const std::function<torch::Tensor(const torch::Tensor&)>& tensor) {
  if (value.isTensor()) {
    torch::Tensor replaced = tensor(value.toTensor());
    return replaced.is_same(value.toTensor()) ? value : c10::IValue(std::move(replaced));
  }
  if (value.isList()) {
    c10::impl::GenericList out(c10::AnyType::get());
    for (const c10::IValue& item : value.toListRef()) out.push_back(plain_lists(item, tensor));
    return out;
  }
  if (value.isGenericDict()) {
    const auto dict = value.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    bool changed = false;
    for (const auto& entry : dict) {
      c10::IValue item = plain_lists(entry.value(), tensor);
      changed = changed || !item.isSameIdentity(entry.value());
      out.insert(entry.key(), std::move(item));
    }
    return changed ? c10::IValue(out) : value;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    bool changed = false;
    for (const c10::IValue& item : value.toTupleRef().elements()) {
      items.push_back(plain_lists(item, tensor));
      changed = changed || !items.back().isSameIdentity(item);
    }
    return changed ? c10::ivalue::Tuple::create(std::move(items)) : value;
  }
  return value;
}

}  // namespace

void write_archive(const c10::IValue& value, const ByteSink& sink, const DeferredValues& deferred,
                   const ExtraRecordOf& extra) {
  // The pickle holds the structure and refers to each tensor's storage by
  // number; the storages follow as records written from the tensors' own
  // memory (a CUDA one copied to the CPU one at a time): the file is never
  // whole in memory. What torch::pickle_save writes, byte for byte
  // (torch::jit::writeArchiveAndTensors: the storages, the pickle, then the
  // writer's version record), a placeholder's record once `deferred` gives its value.
  // Untagged, with plain lists: what Python's torch.load reads with its
  // defaults (weights_only=True), which refuses the JIT pickler's
  // restore_type_tag and build_intlist-style globals. LibTorch reads it too.
  // A GPU's tensors are written as CPU ones (a placeholder each in the
  // pickle, their bytes copied out a storage at a time as their records are
  // written), so the file loads on any machine, as after .cpu().
  OffCpu off_cpu;
  std::unordered_map<const c10::StorageImpl*, torch::Tensor> by_storage;
  auto portable = [&](const torch::Tensor& t) -> torch::Tensor {
    const bool off = t.defined() && t.has_storage() && !t.is_cpu() && !t.is_meta() && t.storage().nbytes() > 0;
    return off ? cpu_placeholder(t, off_cpu, by_storage) : t;
  };
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
                              nullptr, nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(plain_lists(value, portable));
  pickler.stop();
  const std::vector<at::Tensor>& tensors = pickler.tensorData();
  const std::string version = std::to_string(caffe2::serialize::kMinProducedFileFormatVersion) + "\n";
  std::vector<std::pair<std::string, size_t>> records;
  PlaceholderRecords placeholders;
  for (size_t i = 0; i < tensors.size(); ++i) {
    records.emplace_back("data/" + std::to_string(i), tensors[i].storage().nbytes());
    const c10::StorageImpl* storage = tensors[i].storage().unsafeGetStorageImpl();
    if (is_deferred(tensors[i]) && off_cpu.count(storage) == 0) placeholders.emplace(storage, i);
  }
  records.emplace_back("data.pkl", pickle.size());
  records.emplace_back("version", version.size());
  LT_INTERNAL_ASSERT(placeholders.empty() || deferred || extra, "write_pickle_archive: ", placeholders.size(),
                     " placeholder tensors and nothing to give their values");
  ExtraRecord added;
  if (extra) {
    added = extra(placeholders);
    records.emplace_back(added.name, added.bytes.size());
  }
  if (!StoredZipWriter::writes(records)) {
    LT_INTERNAL_ASSERT(placeholders.empty(), "write_pickle_archive: placeholders in an archive of ", records.size(),
                       " records or with an empty one");
    std::vector<at::Tensor> whole = tensors;  // LibTorch's writer takes every record at once
    for (auto& t : whole) {
      auto it = off_cpu.find(t.storage().unsafeGetStorageImpl());
      if (it != off_cpu.end()) t = storage_on_cpu(it->second);
    }
    write_with_libtorch(sink, pickle, whole);
    return;
  }
  StoredZipWriter zip("archive", sink);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (auto it = off_cpu.find(tensors[i].storage().unsafeGetStorageImpl()); it != off_cpu.end()) {
      const torch::Tensor bytes = storage_on_cpu(it->second);
      zip.record(records[i].first, static_cast<const char*>(bytes.data_ptr()), bytes.nbytes());
      continue;
    }
    if (is_deferred(tensors[i])) continue;
    const torch::jit::WriteableTensorData storage = torch::jit::getWriteableTensorData(tensors[i]);
    zip.record(records[i].first, storage.data(), storage.sizeInBytes());
  }
  if (deferred) {
    std::exception_ptr failure;  // rethrown once `deferred` finished its collectives
    std::vector<bool> written(tensors.size(), false);
    deferred([&](const torch::Tensor& placeholder, const torch::Tensor& value) {
      if (failure) return;
      try {
        auto it = placeholders.find(placeholder.storage().unsafeGetStorageImpl());
        LT_INTERNAL_ASSERT(it != placeholders.end() && !written[it->second],
                           "write_pickle_archive: a value for no placeholder of the archive, or given twice");
        const size_t i = it->second;
        const torch::Tensor bytes = value.to(torch::kCPU).contiguous();
        LT_INTERNAL_ASSERT(bytes.nbytes() == records[i].second && bytes.dtype() == placeholder.dtype(),
                           "write_pickle_archive: a value of ", bytes.nbytes(), " bytes of ", bytes.dtype(),
                           " for a placeholder of ", records[i].second, " bytes of ", placeholder.dtype());
        zip.record(records[i].first, static_cast<const char*>(bytes.data_ptr()), bytes.nbytes());
        written[i] = true;
      } catch (...) {
        failure = std::current_exception();
      }
    });
    if (failure) std::rethrow_exception(failure);
    for (const auto& [storage, i] : placeholders) {
      LT_INTERNAL_ASSERT(written[i], "write_pickle_archive: no value was given for placeholder record ", i);
    }
  }
  zip.record("data.pkl", pickle.data(), pickle.size());
  zip.record("version", version.data(), version.size());
  if (extra) zip.record(added.name, added.bytes.data(), added.bytes.size());
  zip.finish();
}

c10::IValue load_archive(const std::shared_ptr<CheckedReader>& file, const RecordElsewhere& elsewhere) {
  try {
    // What torch::jit::readArchiveAndTensors does, each tensor's bytes a
    // view of the mapped file (mapped_record; a copy where it cannot be):
    // loading takes no memory of the process's own for the tensors.
    caffe2::serialize::PyTorchStreamReader reader(file);
    c10::IValue value;
    try {
      const auto [record, record_size] = reader.getRecord("data.pkl");
      // Python's state_dict(), an OrderedDict with _metadata, made readable (pickle_opcodes.h).
      std::string pickle(static_cast<const char*>(record.get()), record_size);
      const bool adapted = adapt_python_pickle(pickle);
      size_t pickle_read = 0;
      auto read_pickle = [&](char* buffer, size_t n) -> size_t {
        n = std::min(n, pickle.size() - pickle_read);
        std::memcpy(buffer, pickle.data() + pickle_read, n);
        pickle_read += n;
        return n;
      };
      auto read_record = [&](const std::string& key) -> at::DataPtr {
        at::DataPtr mapped = file->mapped_record("data/" + key);
        if (mapped) return mapped;
        if (elsewhere && !reader.hasRecord("data/" + key)) return elsewhere(key);
        return std::get<0>(reader.getRecord("data/" + key));
      };
      // Every tensor onto the CPU, whatever place the file names (a checkpoint PyTorch or Lightning wrote
      // from a GPU names cuda:N): torch.load(map_location="cpu"); the strategy moves what it loads to its device.
      torch::jit::Unpickler unpickler(read_pickle, nullptr, nullptr, read_record, at::Device(at::kCPU));
      unpickler.set_version(reader.version());
      value = unpickler.parse_ivalue();
      if (adapted) drop_build_states(value);
    } catch (const std::exception& e) {
      if (!file->problem().empty()) file->corrupt(file->problem());  // a record failed its CRC-32
      const std::string what = error_message(e);
      // Pickle's APPEND (97): how Python writes a list of one element.
      const bool append = what.find("Unknown opcode for unpickling") != std::string::npos &&
                          what.find(": 97") != std::string::npos;
      file->corrupt(c10::str(
          what.substr(0, 200),
          append ? "; if Python wrote it: it holds a list of one element, which LibTorch 1.13's unpickler cannot "
                   "read; save such a list as a tuple (an optimizer's state_dict with one parameter group: "
                   "{\"state\": sd[\"state\"], \"param_groups\": tuple(sd[\"param_groups\"])})"
                 : ""));
    }
    file->check_the_rest();  // records the pickle does not refer to
    return value;
  } catch (const ValueError&) {
    throw;
  } catch (const std::exception& e) {
    if (!file->problem().empty()) file->corrupt(file->problem());
    file->corrupt(error_message(e).substr(0, 200));
  }
}

}  // namespace lt::detail
