// tools/sim/picture_internal.hpp: what the parts of the picture share (picture.cpp records the
// run, picture_json.cpp writes its data, picture_html.cpp the page, picture_svg.cpp the static
// picture): the rounding of times, and the drawing's text, colours, ticks and marks.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "picture.hpp"

namespace creditloop::sim {

// Microseconds and micro-credits, rounded half away from zero as the trace rounds them. A page
// reads numbers as doubles: magnitudes are held within 2^53 so that none is read inexactly.
inline constexpr std::int64_t kMaxExact = (std::int64_t{1} << 53) - 1;

inline std::int64_t micro_time(Nanos t) {
  return std::min<std::int64_t>((t + 500) / 1000, kMaxExact);
}

// A number as short as it can be for the picture's precision: one decimal, none when zero.
inline void append_fixed(std::string& out, double v) {
  char digits[32];
  const double rounded = std::round(v * 10) / 10;
  const auto r = std::to_chars(digits, digits + sizeof digits, rounded == 0 ? 0.0 : rounded,
                               std::chars_format::fixed, 1);
  std::string_view s(digits, static_cast<std::size_t>(r.ptr - digits));
  if (s.size() > 2 && s.substr(s.size() - 2) == ".0") s.remove_suffix(2);
  out += s;
}

inline std::string fixed(double v) {
  std::string s;
  append_fixed(s, v);
  return s;
}

// A plain decimal for text: up to 6 places, trailing zeros dropped.
inline std::string decimal(double v) {
  char digits[48];
  const auto r = std::to_chars(digits, digits + sizeof digits, v, std::chars_format::fixed, 6);
  std::string s(digits, r.ptr);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

inline std::string metered_classes(int k) {
  std::string s = std::to_string(k) + (k == 1 ? " metered class (" : " metered classes (");
  for (int c = 0; c < k; ++c) {
    if (c > 0) s += ", ";
    s += creditloop::class_name(static_cast<ClassId>(c));
  }
  return s + ")";
}

inline std::string seconds(std::int64_t micro) {
  return decimal(static_cast<double>(micro) / 1e6) + " s";
}

inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        // Control characters are not allowed in XML 1.0 text at all.
        out += static_cast<unsigned char>(ch) < 0x20 ? ' ' : ch;
    }
  }
  return out;
}

// Colours by class: P1.. from a palette that colour-blind readers can tell apart (Okabe and
// Ito); the unmetered class is dark grey, a request never dispatched light grey, and the tick
// where a withdrawn one left its queue near black. The same values are in page/open.js.
inline constexpr std::array<const char*, creditloop::kMaxClasses> kClassColour = {
    "#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#b8a800"};
inline constexpr std::array<const char*, creditloop::kMaxClasses> kClassTint = {
    "#99c7e0", "#f5d999", "#99d8c7", "#ebc9dc", "#bbe1f6", "#eebf99", "#e3dc99"};
inline constexpr const char* kUnmeteredColour = "#555555";
inline constexpr const char* kUnmeteredTint = "#bbbbbb";
inline constexpr const char* kQueuedColour = "#dddddd";
inline constexpr const char* kWithdrawnColour = "#222222";

inline const char* colour(int cls, int k) {
  return cls >= k ? kUnmeteredColour : kClassColour[static_cast<std::size_t>(cls)];
}
inline const char* tint(int cls, int k) {
  if (cls < 0) return kQueuedColour;
  return cls >= k ? kUnmeteredTint : kClassTint[static_cast<std::size_t>(cls)];
}

// A tick step of 1, 2 or 5 times a power of ten giving at most `most` ticks over `span`.
inline double tick_step(double span, int most) {
  const double raw = span / most;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

// In the largest unit that keeps labels short: 0.5 s rather than 500 ms.
inline std::string tick_label(double t, double step) {
  if (step >= 0.1) return decimal(t) + " s";
  if (step >= 1e-4) return decimal(t * 1e3) + " ms";
  return decimal(t * 1e6) + " \u00b5s";
}

// Adds the length of [s, e) that falls in each unit bin (bins 0..n-1), through a difference array
// for the whole bins so that a long interval costs no more than a short one.
struct Coverage {
  std::vector<double> part;
  std::vector<double> diff;
  explicit Coverage(std::size_t n) : part(n, 0.0), diff(n + 1, 0.0) {}
  void add(double s, double e) {
    const auto n = static_cast<double>(part.size());
    s = std::clamp(s, 0.0, n);
    e = std::clamp(e, 0.0, n);
    if (e <= s) return;
    const auto bs = static_cast<std::size_t>(s);
    const auto be = static_cast<std::size_t>(e);
    if (bs == be) {
      part[bs] += e - s;
      return;
    }
    part[bs] += static_cast<double>(bs + 1) - s;
    diff[bs + 1] += 1;
    diff[be] -= 1;
    if (be < part.size()) part[be] += e - static_cast<double>(be);
  }
  [[nodiscard]] std::vector<double> values() const {
    std::vector<double> v(part.size());
    double run = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      run += diff[i];
      v[i] = part[i] + run;
    }
    return v;
  }
};

// One stroked path of many short segments in one colour: the compact way to draw many marks.
struct Strokes {
  std::string d;
  void segment_h(double x, double y, double w) { segment(x, y, 'h', w); }
  void segment_v(double x, double y, double h) { segment(x, y, 'v', h); }
  // A move to (x, y), then a line `length` long: 'h' across, 'v' down.
  void segment(double x, double y, char direction, double length) {
    d += 'M';
    append_fixed(d, x);
    d += ',';
    append_fixed(d, y);
    d += direction;
    append_fixed(d, length);
  }
  void emit(std::string& out, const char* stroke, double width, const char* extra = "") const {
    if (d.empty()) return;
    out += "<path fill=\"none\" stroke=\"";
    out += stroke;
    out += "\" stroke-width=\"";
    append_fixed(out, width);
    out += '"';
    out += extra;
    out += " d=\"";
    out += d;
    out += "\"/>\n";
  }
};

}  // namespace creditloop::sim
