#include "temp_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace creditloop::server {

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void FileDescriptor::reset() noexcept {
  // Not retried on EINTR: on Linux the descriptor is gone whatever close returns.
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

std::variant<FileDescriptor, std::error_code> unlinked_temp_file(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) return FileDescriptor(fd);
  // A file system without O_TMPFILE says EOPNOTSUPP; a kernel older than 3.11 takes the flag for
  // O_DIRECTORY and says EISDIR. Anything else (no such directory, no permission, no space) is
  // the directory's fault, and mkstemp would only fail the same way.
  if (errno != EOPNOTSUPP && errno != EISDIR) {
    return std::error_code(errno, std::generic_category());
  }
  std::string pattern = dir + "/creditloop-body-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int named = ::mkostemp(name.data(), O_CLOEXEC);
  if (named < 0) return std::error_code(errno, std::generic_category());
  FileDescriptor file(named);
  if (::unlink(name.data()) != 0) return std::error_code(errno, std::generic_category());
  return file;
}

}  // namespace creditloop::server
