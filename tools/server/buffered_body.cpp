#include "buffered_body.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>
#include <variant>

namespace creditloop::server {

namespace {

std::error_code last_error() { return {errno, std::generic_category()}; }

}  // namespace

std::error_code BufferedBody::begin(std::uint64_t memory_bound, std::string dir,
                                    std::optional<std::uint64_t> length) {
  release();
  memory_bound_ = memory_bound;
  dir_ = std::move(dir);
  length_ = length;
  if (length && *length > memory_bound) return spill();
  // A body known to fit is read into exactly its room: no reallocation, no slack.
  if (length) memory_.reserve(static_cast<std::size_t>(*length));
  return {};
}

std::span<char> BufferedBody::room() {
  room_at_ = memory_.size();
  std::size_t want = kPiece;
  if (length_) {
    // The parser never gives more than the length announced; at least one byte, should it ask.
    const std::uint64_t left = *length_ > size() ? *length_ - size() : 1;
    want = static_cast<std::size_t>(std::min<std::uint64_t>(want, left));
  }
  memory_.resize(room_at_ + want);
  return {memory_.data() + room_at_, want};
}

std::error_code BufferedBody::commit(std::size_t n) {
  memory_.resize(room_at_ + n);
  if (file_) {
    const std::error_code ec = write_out(memory_);
    memory_.clear();
    return ec;
  }
  if (memory_.size() <= memory_bound_) return {};
  return spill();
}

std::error_code BufferedBody::spill() {
  auto made = unlinked_temp_file(dir_);
  if (auto* ec = std::get_if<std::error_code>(&made)) return *ec;
  file_ = std::get<FileDescriptor>(std::move(made));
  file_size_ = 0;
  const std::error_code ec = write_out(memory_);
  // From here the memory holds one piece at a time: what grew to the bound goes back.
  std::string().swap(memory_);
  memory_.reserve(kPiece);
  return ec;
}

std::error_code BufferedBody::write_out(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(file_.get(), bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return last_error();
    if (n == 0) return std::make_error_code(std::errc::io_error);  // never progress: as a fault
    bytes.remove_prefix(static_cast<std::size_t>(n));
    file_size_ += static_cast<std::uint64_t>(n);
  }
  return {};
}

std::error_code BufferedBody::read_at(std::uint64_t offset, std::span<char> out,
                                      std::size_t& got) const {
  got = 0;
  const std::uint64_t left = offset < file_size_ ? file_size_ - offset : 0;
  const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(out.size(), left));
  while (got < want) {
    const ssize_t n =
        ::pread(file_.get(), out.data() + got, want - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return last_error();
    // Shorter than what was written: the file changed under the server.
    if (n == 0) return std::make_error_code(std::errc::io_error);
    got += static_cast<std::size_t>(n);
  }
  return {};
}

void BufferedBody::release() noexcept {
  file_.reset();
  file_size_ = 0;
  std::string().swap(memory_);
}

}  // namespace creditloop::server
