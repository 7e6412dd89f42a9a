#pragma once
// Output files written whole or not at all: created before a run, so that a path that cannot be
// written fails before anything else is, and moved into place only once complete.

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace creditloop::tools {

// A picture file. Its temporary is created beside the target before the run, so that a path that
// cannot be written fails before anything else is, and renamed over the target only once
// complete, so that a reader never sees half a picture. Discarded unless committed.
class OutputFile {
 public:
  OutputFile(std::string option, std::string path)
      : option_(std::move(option)), path_(std::move(path)) {}
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  ~OutputFile() { discard(); }

  /// Creates the temporary; on failure, the one-line reason.
  [[nodiscard]] bool open(std::string& error) {
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      error = option_ + " " + path_ + ": is a directory";
      return false;
    }
    temp_ = path_ + ".XXXXXX";
    fd_ = mkstemp(temp_.data());
    if (fd_ < 0) {
      error = option_ + " " + path_ + ": cannot create: " + std::strerror(errno);
      temp_.clear();
      return false;
    }
    // mkstemp makes the file private; a picture is as readable as any file the user creates.
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(fd_, 0666 & ~mask);
    return true;
  }

  /// Writes `content` at the end of the temporary; on failure, the one-line reason.
  [[nodiscard]] bool append(const std::string& content, std::string& error) {
    std::size_t done = 0;
    while (done < content.size()) {
      const ssize_t n = write(fd_, content.data() + done, content.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = option_ + " " + path_ + ": cannot write: " + std::strerror(errno);
        return false;
      }
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// Writes `content` and moves it into place; on failure, the one-line reason.
  [[nodiscard]] bool commit(const std::string& content, std::string& error) {
    if (!append(content, error)) return false;
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) {
      error = option_ + " " + path_ + ": cannot write: " + std::strerror(errno);
      return false;
    }
    if (rename(temp_.c_str(), path_.c_str()) != 0) {
      error = option_ + " " + path_ + ": cannot replace: " + std::strerror(errno);
      return false;
    }
    temp_.clear();
    return true;
  }

  void discard() noexcept {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    if (!temp_.empty()) unlink(temp_.c_str());
    temp_.clear();
  }

 private:
  std::string option_;
  std::string path_;
  std::string temp_;
  int fd_ = -1;
};

// The file of --capture. The capture writer writes a path of its own; it is given one inside a
// private directory created beside FILE before the run, renamed over FILE once complete and
// removed otherwise, so that a capture, like a picture, is written whole or not at all.
class CaptureTarget {
 public:
  explicit CaptureTarget(std::string path) : path_(std::move(path)) {}
  CaptureTarget(const CaptureTarget&) = delete;
  CaptureTarget& operator=(const CaptureTarget&) = delete;
  ~CaptureTarget() { discard(); }

  /// Creates the directory; on failure, the one-line reason.
  [[nodiscard]] bool open(std::string& error) {
    struct stat st {};
    if (stat(path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      error = "--capture " + path_ + ": is a directory";
      return false;
    }
    dir_ = path_ + ".XXXXXX";
    if (mkdtemp(dir_.data()) == nullptr) {
      error = "--capture " + path_ + ": cannot create: " + std::strerror(errno);
      dir_.clear();
      return false;
    }
    return true;
  }
  /// Where the writer writes.
  [[nodiscard]] std::string file() const { return dir_ + "/capture"; }

  [[nodiscard]] bool commit(std::string& error) {
    if (rename(file().c_str(), path_.c_str()) != 0) {
      error = "--capture " + path_ + ": cannot replace: " + std::strerror(errno);
      return false;
    }
    discard();
    return true;
  }

  void discard() noexcept {
    if (dir_.empty()) return;
    unlink(file().c_str());
    rmdir(dir_.c_str());
    dir_.clear();
  }

 private:
  std::string path_;
  std::string dir_;
};

}  // namespace creditloop::tools
