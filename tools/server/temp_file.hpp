// A temporary file that never has a name once it is open: nothing of it is left on disk when its
// descriptor closes, whether the server ends cleanly, fails, or is killed.
#pragma once

#include <string>
#include <system_error>
#include <utility>
#include <variant>

namespace creditloop::server {

/// A file descriptor, closed with its owner.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

/// A new file in `dir`, readable and writable, that no path names: O_TMPFILE where the file
/// system has it, else mkstemp and an unlink at once (a crash between the two is the one moment a
/// name exists). The error, errno's, when neither works.
[[nodiscard]] std::variant<FileDescriptor, std::error_code> unlinked_temp_file(
    const std::string& dir);

}  // namespace creditloop::server
