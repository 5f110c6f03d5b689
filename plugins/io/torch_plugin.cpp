#include <lightning_cpp/plugins/io/torch_plugin.h>

#include <filesystem>
#include <memory>
#include <system_error>

#include <lightning_cpp/core/files.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/plugins/io/checked_reader.h>
#include <lightning_cpp/plugins/io/pickle_archive.h>
#include <lightning_cpp/plugins/io/sharded_checkpoint.h>

namespace lt {

void TorchCheckpointIO::save_checkpoint(const c10::IValue& checkpoint, const std::string& path,
                                        const DeferredValues& deferred) {
  atomic_pickle_save(checkpoint, path, deferred);
}

c10::IValue TorchCheckpointIO::load_checkpoint(const std::string& path, bool placeholders) {
  return pickle_load_file(path, placeholders);
}

void TorchCheckpointIO::remove_checkpoint(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // a sharded checkpoint is a folder
}

void write_pickle_archive(const c10::IValue& value, const std::function<void(const void*, size_t)>& sink,
                          const DeferredValues& deferred) {
  detail::write_archive(value, sink, deferred, {});
}

void atomic_pickle_save(const c10::IValue& value, const std::string& path, const DeferredValues& deferred) {
  FileReplacement file(path);
  write_pickle_archive(value, [&](const void* data, size_t size) { file.write(data, size); }, deferred);
  file.commit();
}

c10::IValue pickle_load_file(const std::string& path, bool placeholders) {
  if (is_sharded_checkpoint(path)) return detail::load_sharded(path, placeholders);
  return detail::load_archive(std::make_shared<detail::CheckedReader>(path));
}

void check_checkpoint_file(const std::string& path) {
  if (is_sharded_checkpoint(path)) return detail::check_sharded(path);
  detail::CheckedReader(path).check_the_rest();
}

void load_weights(torch::nn::Module& module, const std::string& path, bool strict) {
  load_module_state_dict(module, state_dict_from(pickle_load_file(path), path), strict);
}

}  // namespace lt
