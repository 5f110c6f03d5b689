#include <lightning_cpp/core/checkpoint_io.h>

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <variant>

#include <ATen/CPUGeneratorImpl.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/files.h>

namespace lt {

c10::Dict<std::string, torch::Tensor> module_state_dict(const torch::nn::Module& module) {
  c10::Dict<std::string, torch::Tensor> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.insert(p.key(), p.value().detach());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.insert(b.key(), b.value().detach());
  return out;
}

void load_module_state_dict(torch::nn::Module& module, const c10::Dict<std::string, torch::Tensor>& state,
                            bool strict) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing;
  size_t matched = 0;
  auto copy_into = [&](const std::string& name, torch::Tensor& target) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      return;
    }
    const torch::Tensor& source = it->value();
    LT_CHECK_VALUE(source.sizes() == target.sizes(), "state_dict: '", name, "' has shape ", source.sizes(),
                   " but the module expects ", target.sizes());
    target.copy_(source);
    ++matched;
  };
  for (auto& p : module.named_parameters(true)) copy_into(p.key(), p.value());
  for (auto& b : module.named_buffers(true)) copy_into(b.key(), b.value());
  if (strict) {
    LT_CHECK_VALUE(missing.empty(), "state_dict: missing key(s) ", c10::Join(", ", missing));
    LT_CHECK_VALUE(matched == state.size(), "state_dict: ", state.size() - matched,
                   " unexpected key(s) not in the module");
  }
}

void atomic_pickle_save(const c10::IValue& value, const std::string& path) {
  const std::vector<char> bytes = torch::pickle_save(value);
  replace_file(path, bytes.data(), bytes.size());
}

namespace {

uint16_t le16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint8_t>(p[1]) << 8);
}

uint32_t le32(const char* p) { return static_cast<uint32_t>(le16(p)) | static_cast<uint32_t>(le16(p + 2)) << 16; }

constexpr uint32_t kLocalHeader = 0x04034b50, kDirectoryEntry = 0x02014b50, kDirectoryEnd = 0x06054b50;

// What is wrong with the zip archive torch.save / torch::pickle_save write,
// or "" when its directory holds and every stored record matches its CRC-32
// (LibTorch 1.13's reader checks neither: a flipped byte loaded silently).
// Zip64 archives (over 4 GiB) are left to LibTorch's reader.
std::string zip_problem(const std::vector<char>& bytes) {
  constexpr size_t kEndSize = 22, kMaxComment = 65535;
  if (bytes.size() < kEndSize) return "too short for a zip archive";
  size_t end = bytes.size() - kEndSize;
  const size_t lowest = end > kMaxComment ? end - kMaxComment : 0;
  while (le32(&bytes[end]) != kDirectoryEnd) {
    if (end == lowest) return "no zip directory at its end";
    --end;
  }
  const uint16_t entries = le16(&bytes[end + 10]);
  const uint32_t directory_size = le32(&bytes[end + 12]);
  const uint32_t directory = le32(&bytes[end + 16]);
  if (entries == 0xFFFF || directory == 0xFFFFFFFF || directory_size == 0xFFFFFFFF) return "";
  if (uint64_t{directory} + directory_size > end) return "its zip directory points past the file's end";
  size_t at = directory;
  for (uint16_t e = 0; e < entries; ++e) {
    if (at + 46 > end || le32(&bytes[at]) != kDirectoryEntry) return "its zip directory is damaged";
    const uint16_t method = le16(&bytes[at + 10]);
    const uint32_t crc = le32(&bytes[at + 16]);
    const uint32_t size = le32(&bytes[at + 20]);
    const size_t name_size = le16(&bytes[at + 28]);
    const size_t rest = name_size + le16(&bytes[at + 30]) + le16(&bytes[at + 32]);
    const uint32_t local = le32(&bytes[at + 42]);
    if (at + 46 + rest > end) return "its zip directory is damaged";
    const std::string name(&bytes[at + 46], name_size);
    if (size == 0xFFFFFFFF || local == 0xFFFFFFFF) return "";
    if (uint64_t{local} + 30 > bytes.size() || le32(&bytes[local]) != kLocalHeader) {
      return c10::str("record '", name, "' has no header where the directory says");
    }
    const uint64_t data = uint64_t{local} + 30 + le16(&bytes[local + 26]) + le16(&bytes[local + 28]);
    if (data + size > bytes.size()) return c10::str("record '", name, "' runs past the file's end");
    if (method == 0) {  // stored, as torch.save writes every record
      const auto computed = static_cast<uint32_t>(
          crc32(0, reinterpret_cast<const Bytef*>(bytes.data() + data), static_cast<uInt>(size)));
      if (computed != crc) {
        char hex[64];
        std::snprintf(hex, sizeof hex, "stored %08x, computed %08x", crc, computed);
        return c10::str("record '", name, "' fails its CRC-32 check (", hex, ")");
      }
    }
    at += 46 + rest;
  }
  return "";
}

}  // namespace

namespace {

// The bytes of checkpoint `path`, checked: a regular file, a zip archive
// whose directory holds and whose records match their CRC-32.
std::vector<char> read_checked(const std::string& path) {
  std::error_code ec;
  LT_CHECK_VALUE(!std::filesystem::is_directory(path, ec), "checkpoint '", path, "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  LT_CHECK_VALUE(in.good(), "checkpoint '", path, "' does not exist or cannot be read");
  LT_CHECK_VALUE(std::filesystem::is_regular_file(path, ec), "checkpoint '", path, "' is not a regular file");
  const auto file_size = std::filesystem::file_size(path, ec);
  // The header first: a file that is no zip archive is not read whole.
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  LT_CHECK_VALUE(in.gcount() == 4 && le32(magic) == kLocalHeader, "checkpoint '", path, "' is truncated or corrupt (",
                 file_size, " bytes): not a zip archive, as torch.save and lightning-cpp write them");
  in.seekg(0);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const std::string problem = zip_problem(bytes); !problem.empty()) {
    throw ValueError(c10::str("checkpoint '", path, "' is truncated or corrupt (", bytes.size(), " bytes): ", problem));
  }
  return bytes;
}

}  // namespace

void check_checkpoint_file(const std::string& path) { (void)read_checked(path); }

c10::IValue pickle_load_file(const std::string& path) {
  const std::vector<char> bytes = read_checked(path);
  try {
    return torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    // LibTorch 1.13's unpickler cannot read collections.OrderedDict (what
    // torch.save(model.state_dict()) writes); the marker is a hint, not proof:
    // a cut file may hold it too.
    static const std::string kOrderedDict = "collections\nOrderedDict\n";
    const bool ordered_dict =
        std::search(bytes.begin(), bytes.end(), kOrderedDict.begin(), kOrderedDict.end()) != bytes.end();
    throw ValueError(c10::str(
        "checkpoint '", path, "' is truncated or corrupt (", bytes.size(), " bytes): ",
        error_message(e).substr(0, 200),
        ordered_dict ? "; if Python's torch.save(model.state_dict()) wrote it: it holds a collections.OrderedDict, "
                       "which LibTorch 1.13 cannot read; save a plain dict instead: "
                       "torch.save(dict(model.state_dict()), path)"
                     : ""));
  }
}

c10::Dict<std::string, torch::Tensor> state_dict_from(const c10::IValue& loaded, const std::string& path) {
  LT_CHECK_VALUE(loaded.isGenericDict(), "'", path, "' holds no state_dict (not a dict)");
  auto dict = loaded.toGenericDict();
  // A lightning-cpp (or Lightning) checkpoint nests the weights under "state_dict".
  if (dict.contains("state_dict") && dict.at("state_dict").isGenericDict()) dict = dict.at("state_dict").toGenericDict();
  c10::Dict<std::string, torch::Tensor> weights;
  for (const auto& kv : dict) {
    LT_CHECK_VALUE(kv.key().isString() && kv.value().isTensor(), "'", path,
                   "' is not a state_dict: expected {name: tensor}, found a ", kv.value().tagKind(), " entry");
    weights.insert(kv.key().toStringRef(), kv.value().toTensor());
  }
  return weights;
}

void load_weights(torch::nn::Module& module, const std::string& path, bool strict) {
  load_module_state_dict(module, state_dict_from(pickle_load_file(path), path), strict);
}

torch::Tensor optimizer_to_bytes(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream os;
  archive.save_to(os);
  const std::string s = os.str();
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, torch::kUInt8).clone();
}

void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const torch::Tensor& bytes) {
  const auto contiguous = bytes.contiguous();
  std::istringstream is(std::string(static_cast<const char*>(contiguous.data_ptr()), contiguous.numel()));
  torch::serialize::InputArchive archive;
  archive.load_from(is);
  optimizer.load(archive);
}

StateDict rng_states() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  StateDict rng = new_state_dict();
  rng.insert("torch", gen.get_state());
  return rng;
}

void load_rng_states(const StateDict& states) {
  if (!states.contains("torch")) return;
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(states.at("torch").toTensor());
}

}  // namespace lt
