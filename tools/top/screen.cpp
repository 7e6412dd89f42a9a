#include "screen.hpp"

#include <curses.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>

namespace creditloop::top {
namespace {

enum Pair : short { good = 1, warn, alert, first_class };

// Class colours, cycled; chosen apart from green, yellow and red, which mean good, warn, alert.
constexpr std::array<short, 4> kClassColours{COLOR_CYAN, COLOR_MAGENTA, COLOR_BLUE, COLOR_WHITE};

SCREEN* g_screen = nullptr;

int attributes(const Span& s, bool colour) {
  const auto pair = [](int p) { return static_cast<int>(COLOR_PAIR(p)); };
  switch (s.tone) {
    case Tone::plain:
      return A_NORMAL;
    case Tone::dim:
      return A_DIM;
    case Tone::heading:
      return A_BOLD;
    case Tone::selected:
      return A_BOLD | A_REVERSE;
    case Tone::good:
      return colour ? pair(good) | A_BOLD : A_BOLD;
    case Tone::warn:
      return colour ? pair(warn) | A_BOLD : A_UNDERLINE;
    case Tone::alert:
      return colour ? pair(alert) | A_BOLD : A_BOLD | A_REVERSE;
    case Tone::klass:
      return colour ? pair(first_class + static_cast<int>(s.klass % kClassColours.size()))
                    : A_NORMAL;
  }
  return A_NORMAL;
}

// Writes `line` from column 0 of row `y`, cut at the right edge.
void draw_line(int y, const Line& line, bool colour) {
  const int width = getmaxx(stdscr);
  int x = 0;
  move(y, 0);
  for (const Span& s : line) {
    const int room = width - x;
    if (room <= 0) break;
    const int n = std::min(room, static_cast<int>(s.text.size()));
    attrset(attributes(s, colour));
    addnstr(s.text.c_str(), n);
    x += n;
  }
  attrset(A_NORMAL);
}

}  // namespace

Screen::Screen(bool colour) {
  // newterm, unlike initscr, reports a terminal it cannot drive instead of exiting.
  g_screen = newterm(nullptr, stdout, stdin);
  if (g_screen == nullptr) throw std::runtime_error("cannot drive this terminal (is TERM set?)");
  cbreak();
  noecho();
  nonl();
  keypad(stdscr, TRUE);
  curs_set(0);
  // Esc clears the filter: it should not wait a second to be told from an escape sequence.
  set_escdelay(25);
  colour_ = colour && has_colors();
  if (colour_) {
    start_color();
    use_default_colors();
    init_pair(good, COLOR_GREEN, -1);
    init_pair(warn, COLOR_YELLOW, -1);
    init_pair(alert, COLOR_RED, -1);
    for (std::size_t c = 0; c < kClassColours.size(); ++c) {
      init_pair(static_cast<short>(first_class + static_cast<short>(c)), kClassColours[c], -1);
    }
  }
}

Screen::~Screen() {
  endwin();
  delscreen(g_screen);
  g_screen = nullptr;
}

Key Screen::read_key(int timeout_ms) {
  timeout(std::max(0, timeout_ms));
  const int k = getch();
  switch (k) {
    case ERR:
      return {Key::Kind::none, 0};
    case KEY_RESIZE:
      return {Key::Kind::resize, 0};
    case KEY_ENTER:
    case '\n':
    case '\r':
      return {Key::Kind::enter, 0};
    case 27:
      return {Key::Kind::escape, 0};
    case KEY_BACKSPACE:
    case 127:
    case 8:
      return {Key::Kind::backspace, 0};
    case 12:
      return {Key::Kind::redraw, 0};  // Ctrl-L
    default:
      break;
  }
  if (k >= 0x20 && k < 0x7f) return {Key::Kind::text, static_cast<char>(k)};
  return {Key::Kind::other, 0};
}

void Screen::draw(const Layout& layout, const Overlay& overlay) {
  erase();
  const int height = getmaxy(stdscr);
  // The last row belongs to the prompt while one is open.
  const int bottom = overlay.prompt != nullptr ? height - 1 : height;
  int y = 0;
  for (const Line& l : layout.header) {
    if (y >= bottom) break;
    draw_line(y++, l, colour_);
  }
  if (overlay.help != nullptr) {
    for (const std::string& h : *overlay.help) {
      if (y >= bottom) break;
      draw_line(y++, {{h, Tone::plain, 0}}, colour_);
    }
  } else {
    if (!layout.columns.empty() && y < bottom) draw_line(y++, layout.columns, colour_);
    const auto room = static_cast<std::size_t>(std::max(0, bottom - y));
    const std::size_t n = layout.rows.size();
    // When the rows do not fit, the last row says how many are hidden instead.
    const std::size_t shown = n <= room ? n : room == 0 ? 0 : room - 1;
    for (std::size_t i = 0; i < shown; ++i) draw_line(y++, layout.rows[i], colour_);
    if (shown < n && y < bottom) {
      draw_line(y++,
                {{"... " + std::to_string(n - shown) + " more (a taller terminal or / to filter)",
                  Tone::dim, 0}},
                colour_);
    }
    if (n == 0 && layout.tenants > 0 && y < bottom) {
      draw_line(y++, {{"no tenant matches the filter (Esc clears it)", Tone::dim, 0}}, colour_);
    }
  }
  if (overlay.prompt != nullptr && height > 0) {
    draw_line(height - 1, {{"filter: ", Tone::heading, 0}, {*overlay.prompt, Tone::plain, 0}},
              colour_);
    curs_set(1);
  } else {
    curs_set(0);
  }
  refresh();
}

}  // namespace creditloop::top
