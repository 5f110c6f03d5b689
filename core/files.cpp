#include <lightning_cpp/core/files.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <utility>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "host";
  std::string out(name);
  std::replace(out.begin(), out.end(), '.', '_');  // the name's fields are split on dots
  return out;
}

std::atomic<int64_t> g_files_written{0};

// Writes all `size` bytes; false on an error (errno tells).
bool write_all(int fd, const char* data, size_t size) {
  for (size_t written = 0; written < size;) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    written += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

FileReplacement::FileReplacement(std::string path) : path_(std::move(path)) {
  // Named so that a later run can tell a dead writer's leftovers.
  static const std::string host = host_name();
  std::random_device random;
  for (int attempt = 0; fd_ < 0; ++attempt) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "%08x%08x", random(), random());
    tmp_ = c10::str(path_, kTemporaryMarker, host, ".", ::getpid(), ".", suffix);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt >= 8)) {
      throw Error(c10::str("cannot create '", tmp_, "' (to replace '", path_, "'): ", std::strerror(errno)));
    }
  }
}

FileReplacement::~FileReplacement() {
  if (tmp_.empty()) return;  // committed
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

void FileReplacement::fail(const char* doing) {
  const int error = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  const std::string tmp = std::exchange(tmp_, std::string());
  throw Error(c10::str(doing, " '", tmp, "' failed: ", std::strerror(error), " (removed; '", path_, "' is unchanged)"));
}

void FileReplacement::write(const void* data, size_t size) {
  LT_INTERNAL_ASSERT(!tmp_.empty(), "FileReplacement::write after commit or failure");
  if (!write_all(fd_, static_cast<const char*>(data), size)) fail("writing");
}

void FileReplacement::commit() {
  LT_INTERNAL_ASSERT(!tmp_.empty(), "FileReplacement::commit twice or after a failure");
  // On disk before the rename exposes it.
  if (::fsync(fd_) != 0) fail("syncing");
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) fail("closing");
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) fail("renaming");
  tmp_.clear();
  ++g_files_written;
}

void replace_file(const std::string& path, const char* data, size_t size) {
  FileReplacement file(path);
  file.write(data, size);
  file.commit();
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  static const std::string host = host_name();
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(kTemporaryMarker);
    if (at == std::string::npos) continue;
    // <name>.tmp.<host>.<pid>.<random>, or an older <name>.tmp.<pid>: this host's writers only.
    std::istringstream fields(name.substr(at + std::strlen(kTemporaryMarker)));
    std::string first, second;
    std::getline(fields, first, '.');
    std::getline(fields, second, '.');
    const std::string pid_text = second.empty() ? first : (first == host ? second : std::string());
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stoll(pid_text));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (std::filesystem::remove(entry.path(), ec)) removed.push_back(entry.path().string());
  }
  return removed;
}

void append_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (fd < 0) throw Error(c10::str("cannot open '", path, "' to append to it: ", std::strerror(errno)));
  struct stat before {};
  const bool sized = ::fstat(fd, &before) == 0;
  if (!write_all(fd, text.data(), text.size())) {
    const int error = errno;
    const bool cut = sized && ::ftruncate(fd, before.st_size) == 0;
    ::close(fd);
    throw Error(c10::str("appending to '", path, "' failed: ", std::strerror(error),
                         cut ? " (cut back to its size before)" : " (it may end in a partial line)"));
  }
  if (::close(fd) != 0) throw Error(c10::str("closing '", path, "' failed: ", std::strerror(errno)));
  ++g_files_written;
}

int64_t files_written() { return g_files_written.load(); }

}  // namespace lt
