#pragma once
// Writing the run's files so that a failure is never silent and never
// leaves a half-written file: checkpoints, metrics.csv, hparams.yaml,
// config.yaml. A failure (a full disk, a read-only folder) throws lt::Error
// naming the path and the OS error.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lt {

// Replaces `path` with `size` bytes atomically: a temporary file beside it,
// created exclusively (O_EXCL | O_NOFOLLOW: never through a link someone
// planted) under an unguessable name <path>.tmp.<host>.<pid>.<random>, with
// mode 0666 less the umask; written, fsync'ed, renamed over `path`. On a
// failure the temporary file is removed and `path` is as it was.
void replace_file(const std::string& path, const char* data, size_t size);
inline void replace_file(const std::string& path, const std::string& text) {
  replace_file(path, text.data(), text.size());
}

// replace_file in pieces, for a file too big to hold whole (a checkpoint
// streamed as it is serialized): the temporary file is made at construction,
// write() appends, commit() syncs and renames it over `path`. Destroyed
// before commit() (an error on the way), it removes the temporary file and
// `path` is as it was. Errors throw lt::Error as replace_file's.
class FileReplacement {
 public:
  explicit FileReplacement(std::string path);
  ~FileReplacement();
  FileReplacement(const FileReplacement&) = delete;
  FileReplacement& operator=(const FileReplacement&) = delete;

  void write(const void* data, size_t size);
  void commit();

 private:
  [[noreturn]] void fail(const char* doing);

  std::string path_, tmp_;
  int fd_ = -1;
};

// Appends `text` to `path` (created if missing). On a failure the file is
// cut back to its size before, so no partial line stays.
void append_file(const std::string& path, const std::string& text);

// How many files replace_file and append_file wrote in this process: the
// CLI tells "nothing happened, fix your input" (exit 2) from an error after
// the run wrote something (exit 1).
int64_t files_written();

constexpr const char* kTemporaryMarker = ".tmp.";

// Removes the temporary files in `dir` that replace_file's writers on this
// host left when they died (kill -9, power loss: their pid is gone); returns
// their paths.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace lt
