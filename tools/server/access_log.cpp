#include "access_log.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace creditloop::server {

AccessLog::AccessLog(const std::string& path)
    : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
  if (fd_ < 0) {
    throw std::runtime_error("access_log.path: cannot open \"" + path +
                             "\": " + std::strerror(errno));
  }
}

AccessLog::~AccessLog() { ::close(fd_); }

bool AccessLog::reopen() noexcept {
  const int fresh = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fresh < 0) return false;
  // dup3 swaps the file under fd_ in one step: a concurrent writev holds the old file until it
  // returns, and no write sees a closed descriptor.
  const bool swapped = ::dup3(fresh, fd_, O_CLOEXEC) == fd_;
  ::close(fresh);
  return swapped;
}

void AccessLog::write(std::string_view line) noexcept {
  char newline = '\n';
  iovec parts[2] = {{const_cast<char*>(line.data()), line.size()}, {&newline, 1}};
  const ssize_t n = ::writev(fd_, parts, 2);
  if (n != static_cast<ssize_t>(line.size() + 1)) {
    errors_.fetch_add(1, std::memory_order_relaxed);  // a statistic
  }
}

std::uint64_t AccessLog::errors() const noexcept {
  return errors_.load(std::memory_order_relaxed);  // a statistic
}

}  // namespace creditloop::server
