// tools/sim/table.hpp: the aligned text tables of `--table` and of a replay's report.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace creditloop::sim {

/// Appends `header`, a rule, `rows` and, when `totals` is not empty and there is more than one
/// row, a rule and `totals`: columns two spaces apart, each as wide as its widest cell, those
/// marked in `left` aligned left and the others right, no trailing spaces.
inline void append_table(std::string& out, const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& left,
                         const std::vector<std::string>& totals = {}) {
  const bool with_totals = !totals.empty() && rows.size() > 1;
  std::vector<std::size_t> width(header.size());
  const auto widen = [&width](const std::vector<std::string>& r) {
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  };
  widen(header);
  for (const auto& r : rows) widen(r);
  if (!totals.empty()) widen(totals);
  const auto line = [&](const std::vector<std::string>& r) {
    std::string l;
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (i > 0) l += "  ";
      const std::string pad(width[i] - r[i].size(), ' ');
      l += left[i] ? r[i] + pad : pad + r[i];
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l;
    out += '\n';
  };
  line(header);
  std::vector<std::string> rule;
  for (const std::size_t w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& r : rows) line(r);
  if (with_totals) {
    line(rule);
    line(totals);
  }
}

}  // namespace creditloop::sim
