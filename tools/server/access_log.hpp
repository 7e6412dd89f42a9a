// The access log: one JSON line per answered request, written as it is answered.
//
// Each line goes out in one write(2) to a file opened with O_APPEND, so lines from several I/O
// threads never interleave, a crash loses none that was answered, and nothing is left to flush at
// exit. It costs a system call per request, which is why it is off unless configured (nginx's
// access_log without `buffer=` makes the same trade).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace creditloop::server {

class AccessLog {
 public:
  /// Throws std::runtime_error naming the path when it cannot be opened for appending.
  explicit AccessLog(const std::string& path);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  /// Opens the path again (after a rotation renamed the file) and writes there from now on; a
  /// write under way finishes in the old file. False, with the old file kept, when it cannot be
  /// opened. Any thread.
  bool reopen() noexcept;
  /// Appends `line` and a newline. Any thread. A failed write is counted, never thrown.
  void write(std::string_view line) noexcept;
  [[nodiscard]] std::uint64_t errors() const noexcept;

 private:
  std::string path_;
  int fd_ = -1;
  std::atomic<std::uint64_t> errors_{0};
};

}  // namespace creditloop::server
