// The terminal side of creditloop-top: ncurses set up and restored, keys read with a timeout,
// and a Layout drawn with colours where the terminal has them and with attributes (bold,
// underline, reverse, dim) where it does not. Only this file's .cpp includes curses.
#pragma once

#include <string>
#include <vector>

#include "frame.hpp"

namespace creditloop::top {

struct Key {
  enum class Kind : unsigned char { none, resize, text, enter, escape, backspace, redraw, other };
  Kind kind = Kind::none;
  char ch = 0;  // for Kind::text: a printable ASCII character
};

/// What is drawn over the table: nothing, the help text, or the filter prompt.
struct Overlay {
  const std::vector<std::string>* help = nullptr;
  const std::string* prompt = nullptr;  // the text typed so far
};

class Screen {
 public:
  /// Takes over the terminal. Throws std::runtime_error when it cannot (no terminal, unknown
  /// TERM). `colour` false draws with attributes only, as on a terminal without colours.
  explicit Screen(bool colour);
  ~Screen();  // gives the terminal back as it was
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  /// Waits up to `timeout_ms` for a key; Kind::none when none came. Resizes arrive as keys.
  [[nodiscard]] Key read_key(int timeout_ms);

  /// Draws a whole frame, clipped to the terminal's size.
  void draw(const Layout& layout, const Overlay& overlay);

 private:
  bool colour_ = false;
};

}  // namespace creditloop::top
