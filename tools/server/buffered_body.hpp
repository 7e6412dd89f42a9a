// A request body read whole before its request is queued (proxy mode with request buffering), as
// nginx buffers one: in memory up to a bound (`limits.body_buffer_bytes`, nginx's
// client_body_buffer_size), past it in a temporary file with no name in `proxy.body_temp_dir`
// (client_body_temp_path), so that a connection holds at most the bound and a piece of memory
// however large its body. `limits.body_bytes` bounds the whole; its parser enforces that.
//
// The file goes with its descriptor: when the body is released or destroyed, on whatever path its
// exchange ends. Its writes and reads block the thread for as long as the disk takes, as nginx's
// do without thread pools: the file is in the page cache unless memory is short.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

#include "temp_file.hpp"

namespace creditloop::server {

class BufferedBody {
 public:
  /// The most a read asks for, and the size of the piece a body in the file passes through.
  static constexpr std::size_t kPiece = 16 * 1024;

  /// Readies it for a body of `length` bytes (none: not known, chunked), kept in memory while it
  /// is at most `memory_bound`, else in a file in `dir`. A body known to be longer goes to the
  /// file from its first byte: the error is the file's, when it cannot be made.
  [[nodiscard]] std::error_code begin(std::uint64_t memory_bound, std::string dir,
                                      std::optional<std::uint64_t> length);
  /// Where the next read goes: never empty, at most a piece.
  [[nodiscard]] std::span<char> room();
  /// Takes the first `n` bytes of the last room(). The error is the disk's (ENOSPC, EIO, EFBIG),
  /// when the body had to go to the file and could not.
  [[nodiscard]] std::error_code commit(std::size_t n);

  [[nodiscard]] std::uint64_t size() const noexcept { return file_ ? file_size_ : memory_.size(); }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] bool in_file() const noexcept { return static_cast<bool>(file_); }
  /// The body, when it stayed in memory.
  [[nodiscard]] std::span<char> memory() noexcept { return memory_; }
  /// Copies the file's bytes from `offset` into `out`, as many as there are up to its size:
  /// their count, or the disk's error.
  [[nodiscard]] std::error_code read_at(std::uint64_t offset, std::span<char> out,
                                        std::size_t& got) const;
  /// Lets go of its memory and its file.
  void release() noexcept;

 private:
  [[nodiscard]] std::error_code spill();
  [[nodiscard]] std::error_code write_out(std::string_view bytes);

  std::string memory_;  // the body while it is in memory; then the piece it passes through
  std::size_t room_at_ = 0;
  std::uint64_t memory_bound_ = 0;
  std::optional<std::uint64_t> length_;
  std::string dir_;
  FileDescriptor file_;
  std::uint64_t file_size_ = 0;
};

}  // namespace creditloop::server
