// The static picture, drawn a layer at a time, top to bottom.
#include <algorithm>
#include <cmath>

#include "picture_internal.hpp"

namespace creditloop::sim {

using creditloop::ClassId;

// Where the static picture's parts go, in SVG units (pixels at 100%), its time scale, and the body
// drawn so far, top to bottom: each layer draws at `y` and moves it past what it drew.
struct Picture::Svg {
  static constexpr double kWidth = 1200;
  static constexpr double kX0 = 170;  // the plot's left edge; lane labels to its left
  static constexpr double kX1 = 1170;
  static constexpr double kPlot = kX1 - kX0;
  static constexpr std::size_t kBins = 500;  // aggregate bins, 2 units wide
  static constexpr double kBin = kPlot / kBins;
  static constexpr std::size_t kDetailRequests = 600;  // a lane with more is drawn as aggregates
  static constexpr double kBand = 46;                  // requests
  static constexpr double kBalanceBand = 34;
  static constexpr double kStrip = 8;  // the class mix of dispatches in an aggregated lane
  static constexpr double kPassBand = 20;

  Svg(int classes, std::int64_t end_micro)
      : k(classes),
        end(end_micro),
        span(static_cast<double>(end_micro)),
        seconds_span(span / 1e6),
        step(tick_step(seconds_span, 10)) {}

  [[nodiscard]] double x_of(std::int64_t t) const {
    return kX0 + static_cast<double>(t) / span * kPlot;
  }
  [[nodiscard]] double bin_of(std::int64_t t) const {
    return static_cast<double>(t) / span * static_cast<double>(kBins);
  }
  // The middle of aggregate bin `b`.
  [[nodiscard]] static double bin_x(std::size_t b) {
    return kX0 + (static_cast<double>(b) + 0.5) * kBin;
  }

  const int k;             // metered classes
  const std::int64_t end;  // microseconds
  const double span;       // the same, as the scale's denominator
  const double seconds_span;
  const double step;  // seconds between ticks
  std::string body;
  double y = 0;
  double axis_y = 0;
};

std::string Picture::svg(const RunReport& report) const {
  Svg svg(classes_, std::max<std::int64_t>(end_micro(report), 1));
  svg_header(svg);
  svg_legend(svg);
  svg_axis(svg);
  svg_passes(svg);
  svg_room(svg);
  for (std::size_t li = 0; li < lanes_.size(); ++li) svg_lane(svg, li);
  const double height = svg.y + 4;

  // Grid lines through every lane, drawn first so that they sit under everything.
  std::string grid_d;
  for (double t = 0; t <= svg.seconds_span * (1 + 1e-9); t += svg.step) {
    const double x = Svg::kX0 + t / svg.seconds_span * Svg::kPlot;
    grid_d += "M" + fixed(x) + "," + fixed(svg.axis_y) + "V" + fixed(height - 8);
  }

  std::string out;
  out.reserve(svg.body.size() + 1024);
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed(Svg::kWidth) +
         "\" height=\"" + fixed(height) + "\" viewBox=\"0 0 " + fixed(Svg::kWidth) + " " +
         fixed(height) + "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  out += "<title>" + xml_escape("creditloop-sim: " + title_) + "</title>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  out += "<path id=\"grid\" stroke=\"#eee\" d=\"" + grid_d + "\"/>\n";
  out += svg.body;
  out += "</svg>\n";
  return out;
}

// The run and the scenario's plans and participants.
void Picture::svg_header(Svg& svg) const {
  const int k = svg.k;
  const auto capacities = [&] {
    std::string steps;
    for (const BackendStep& step : scenario_.backend) {
      if (!steps.empty()) steps += ", ";
      steps += std::to_string(step.capacity);
      if (step.at > 0) steps += " at " + seconds(micro_time(step.at));
      if (step.slowdown_milli != 1000) {
        steps += " (slowdown " + decimal(static_cast<double>(step.slowdown_milli) / 1000) + ")";
      }
    }
    return steps;
  };
  std::vector<std::string> lines;
  std::string run =
      metered_classes(k) + ", unmetered " + creditloop::class_name(static_cast<ClassId>(k)) +
      " \u00b7 server: " +
      (scenario_.room_auto
           ? "a learned room of " + std::to_string(scenario_.room_auto->least) + ".." +
                 std::to_string(scenario_.room_auto->most) + " slots"
           : std::to_string(scenario_.slots) + (scenario_.slots == 1 ? " slot" : " slots")) +
      (scenario_.backend.empty() ? std::string() : ", a backend of capacity " + capacities()) +
      " \u00b7 " +
      (scenario_.until ? "until " + seconds(micro_time(*scenario_.until))
                       : std::string("runs until all complete")) +
      " \u00b7 " + std::to_string(requests_.size()) + " requests, " +
      std::to_string(passes_.t.size()) + " passes";
  lines.push_back(run);
  for (const creditloop::Plan& plan : scenario_.config.plans) {
    std::string l = "plan " + plan.name + ":";
    bool any = false;
    for (int c = 0; c < k; ++c) {
      const auto& t = plan.terms[static_cast<std::size_t>(c)];
      if (!t) continue;
      l += std::string(any ? "," : "") + " " + creditloop::class_name(static_cast<ClassId>(c)) +
           " " + decimal(t->rate) + "/s burst " + decimal(t->burst);
      any = true;
    }
    if (!any) l += " no metered class (unmetered only)";
    lines.push_back(l + " (per share)");
  }
  std::string who = "participants, in ring order:";
  for (std::size_t i = 0; i < scenario_.participants.size(); ++i) {
    const ParticipantSpec& s = scenario_.participants[i];
    std::string item = " " + s.name + " (" + s.plan + ", " + std::to_string(s.shares) +
                       (s.shares == 1 ? " share)" : " shares)") +
                       (i + 1 < scenario_.participants.size() ? "," : "");
    if (who.size() + item.size() > 170) {
      lines.push_back(who);
      who = "   ";
    }
    who += item;
  }
  lines.push_back(who);

  std::string& body = svg.body;
  body += "<g id=\"header\">\n<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">";
  body += xml_escape("creditloop-sim \u00b7 " + title_);
  body += "</text>\n";
  svg.y = 22;
  for (const std::string& l : lines) {
    svg.y += 17;
    body += "<text x=\"10\" y=\"" + fixed(svg.y) + "\">" + xml_escape(l) + "</text>\n";
  }
  body += "</g>\n";
}

// A swatch a class, the waiting and queued tints, withdrawals, the credit line, and how to read it.
void Picture::svg_legend(Svg& svg) const {
  const int k = svg.k;
  std::string& body = svg.body;
  double& y = svg.y;
  y += 24;
  body += "<g id=\"legend\">\n";
  double x = 10;
  const auto item = [&](const std::string& swatch, const std::string& label) {
    body += swatch;
    body += "<text x=\"" + fixed(x + 22) + "\" y=\"" + fixed(y) + "\">" + xml_escape(label) +
            "</text>\n";
    x += 34 + 6.8 * static_cast<double>(label.size());
  };
  for (int c = 0; c <= k; ++c) {
    const std::string name = creditloop::class_name(static_cast<ClassId>(c));
    item("<rect x=\"" + fixed(x) + "\" y=\"" + fixed(y - 9) +
             "\" width=\"16\" height=\"10\" fill=\"" + colour(c, k) + "\"/>\n",
         c == k ? name + " (unmetered)" : name);
  }
  item("<rect x=\"" + fixed(x) + "\" y=\"" + fixed(y - 6) + "\" width=\"16\" height=\"4\" fill=\"" +
           kClassTint[0] + "\"/>\n",
       "waiting (tint of the class it went out under)");
  item("<rect x=\"" + fixed(x) + "\" y=\"" + fixed(y - 6) + "\" width=\"16\" height=\"4\" fill=\"" +
           kQueuedColour + "\"/>\n",
       "still queued at the stop");
  if (withdrawals_) {
    item("<path d=\"M" + fixed(x) + "," + fixed(y - 4) + "h12M" + fixed(x + 12) + "," +
             fixed(y - 9) + "v10\" stroke=\"" + kWithdrawnColour + "\"/>\n",
         "withdrawn while queued");
  }
  item("<path d=\"M" + fixed(x) + "," + fixed(y - 4) +
           "h16\" stroke=\"#c00\" stroke-dasharray=\"3,2\"/>\n",
       "one credit");
  y += 16;
  body += "<text x=\"10\" y=\"" + fixed(y) + "\" fill=\"#555\">" +
          xml_escape(
              "Each request runs from its arrival (thin, waiting) through its dispatch to its "
              "completion (thick, in service). Under each lane: its bucket balances, one line a "
              "class. Top: the class each pass settled on.") +
          "</text>\n";
  body += "</g>\n";
}

// The time axis, its ticks and their labels.
void Picture::svg_axis(Svg& svg) const {
  std::string& body = svg.body;
  svg.y += 22;
  const double y = svg.y;
  svg.axis_y = y;
  body += "<g id=\"axis\" font-size=\"11\" fill=\"#444\">\n";
  body += "<path stroke=\"#888\" d=\"M" + fixed(Svg::kX0) + "," + fixed(y) + "H" + fixed(Svg::kX1) +
          "\"/>\n";
  for (double t = 0; t <= svg.seconds_span * (1 + 1e-9); t += svg.step) {
    const double x = Svg::kX0 + t / svg.seconds_span * Svg::kPlot;
    body += "<path stroke=\"#888\" d=\"M" + fixed(x) + "," + fixed(y) + "v-5\"/>";
    body += "<text x=\"" + fixed(x) + "\" y=\"" + fixed(y - 8) + "\" text-anchor=\"middle\">" +
            xml_escape(tick_label(t, svg.step)) + "</text>\n";
  }
  body += "</g>\n";
}

// A tick a pass in the colour of the class it settled on; past one a bin, each bin's class mix.
void Picture::svg_passes(Svg& svg) const {
  const int k = svg.k;
  std::string& body = svg.body;
  svg.y += 6;
  const double y = svg.y;
  constexpr std::size_t kBins = Svg::kBins;
  body += "<g id=\"passes\">\n<text x=\"10\" y=\"" + fixed(y + 14) +
          "\" font-weight=\"bold\">passes</text>\n";
  const Passes& p = passes_;
  std::vector<Strokes> by_class(static_cast<std::size_t>(k + 1));
  if (p.t.size() <= kBins) {
    for (std::size_t i = 0; i < p.t.size(); ++i) {
      by_class[p.cls[i]].segment_v(svg.x_of(p.t[i]), y, Svg::kPassBand);
    }
    for (int c = 0; c <= k; ++c) {
      by_class[static_cast<std::size_t>(c)].emit(body, colour(c, k), 1.2);
    }
  } else {
    std::vector<std::vector<double>> count(static_cast<std::size_t>(k + 1),
                                           std::vector<double>(kBins, 0.0));
    for (std::size_t i = 0; i < p.t.size(); ++i) {
      const auto b = std::min(static_cast<std::size_t>(svg.bin_of(p.t[i])), kBins - 1);
      count[p.cls[i]][b] += 1;
    }
    for (std::size_t b = 0; b < kBins; ++b) {
      double total = 0;
      for (const auto& col : count) total += col[b];
      if (total == 0) continue;
      double bottom = y + Svg::kPassBand;
      for (int c = 0; c <= k; ++c) {
        const double h = Svg::kPassBand * count[static_cast<std::size_t>(c)][b] / total;
        if (h <= 0) continue;
        by_class[static_cast<std::size_t>(c)].segment_v(Svg::bin_x(b), bottom, -h);
        bottom -= h;
      }
    }
    for (int c = 0; c <= k; ++c) {
      by_class[static_cast<std::size_t>(c)].emit(body, colour(c, k), Svg::kBin);
    }
  }
  body += "</g>\n";
  svg.y += Svg::kPassBand + 10;
}

// The learned room's slots over time (a step line) and the backend's capacity (dashed), on one
// scale from 0: where the room stands above the capacity, the backend queues what is above.
void Picture::svg_room(Svg& svg) const {
  if (room_.empty() && scenario_.backend.empty()) return;
  constexpr double kHeight = 50;
  std::string& body = svg.body;
  const double y = svg.y;
  std::uint64_t most = 1;
  for (const auto& [t, slots] : room_) most = std::max<std::uint64_t>(most, slots);
  for (const BackendStep& step : scenario_.backend) most = std::max(most, step.capacity);
  const auto y_of = [&](std::uint64_t n) {
    return y + kHeight * (1 - static_cast<double>(n) / static_cast<double>(most));
  };
  // A step line through (t, n) points held until the next, to the picture's end.
  const auto steps = [&](const std::vector<std::pair<std::int64_t, std::uint64_t>>& points) {
    std::string d;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const double x = svg.x_of(std::min(points[i].first, svg.end));
      d += (i == 0 ? "M" : "H") + fixed(x);
      d += (i == 0 ? "," : "V") + fixed(y_of(points[i].second));
    }
    if (!d.empty()) d += "H" + fixed(Svg::kX1);
    return d;
  };
  body += "<g id=\"room\">\n<text x=\"10\" y=\"" + fixed(y + 14) +
          "\" font-weight=\"bold\">room</text>\n";
  body += "<text x=\"10\" y=\"" + fixed(y + 28) + "\" font-size=\"10\" fill=\"#777\">" +
          xml_escape(room_.empty() ? "dashed: backend capacity" : "slots; dashed: capacity") +
          "</text>\n";
  body += "<rect x=\"" + fixed(Svg::kX0) + "\" y=\"" + fixed(y) + "\" width=\"" +
          fixed(Svg::kPlot) + "\" height=\"" + fixed(kHeight) +
          "\" fill=\"#fff\" stroke=\"#eee\"/>\n";
  body += "<text x=\"" + fixed(Svg::kX0 - 4) + "\" y=\"" + fixed(y + 8) +
          "\" font-size=\"10\" fill=\"#777\" text-anchor=\"end\">" + std::to_string(most) +
          "</text>\n<text x=\"" + fixed(Svg::kX0 - 4) + "\" y=\"" + fixed(y + kHeight) +
          "\" font-size=\"10\" fill=\"#777\" text-anchor=\"end\">0</text>\n";
  // A step that slows the backend: shaded, with its factor, behind the lines.
  for (std::size_t i = 0; i < scenario_.backend.size(); ++i) {
    const BackendStep& step = scenario_.backend[i];
    if (step.slowdown_milli == 1000 || micro_time(step.at) >= svg.end) continue;
    const double x0 = svg.x_of(micro_time(step.at));
    const double x1 = i + 1 < scenario_.backend.size()
                          ? svg.x_of(std::min(micro_time(scenario_.backend[i + 1].at), svg.end))
                          : Svg::kX1;
    body += "<rect x=\"" + fixed(x0) + "\" y=\"" + fixed(y) + "\" width=\"" + fixed(x1 - x0) +
            "\" height=\"" + fixed(kHeight) + "\" fill=\"#f6e3e3\"/>\n";
    body +=
        "<text x=\"" + fixed(x0 + 3) + "\" y=\"" + fixed(y + 10) +
        "\" font-size=\"10\" fill=\"#a33\">" +
        xml_escape("service \u00d7" + decimal(static_cast<double>(step.slowdown_milli) / 1000)) +
        "</text>\n";
  }
  std::vector<std::pair<std::int64_t, std::uint64_t>> capacity;
  for (const BackendStep& step : scenario_.backend)
    capacity.emplace_back(micro_time(step.at), step.capacity);
  if (!capacity.empty()) {
    body += "<path fill=\"none\" stroke=\"#888\" stroke-dasharray=\"4,3\" d=\"" + steps(capacity) +
            "\"/>\n";
  }
  std::vector<std::pair<std::int64_t, std::uint64_t>> room;
  room.reserve(room_.size());
  for (const auto& [t, slots] : room_) {
    if (!room.empty() && room.back().first == t) {
      room.back().second = slots;  // the last room of an instant is the one that holds
    } else {
      room.emplace_back(t, slots);
    }
  }
  if (!room.empty()) {
    body +=
        "<path fill=\"none\" stroke=\"#1a5fb4\" stroke-width=\"1.3\" d=\"" + steps(room) + "\"/>\n";
  }
  body += "</g>\n";
  svg.y += kHeight + 12;
}

// A participant's lane: its name and plan, its requests, and under them its balances.
void Picture::svg_lane(Svg& svg, std::size_t index) const {
  const Lane& lane = lanes_[index];
  const ParticipantSpec& spec = scenario_.participants[index];
  std::string& body = svg.body;
  const double y = svg.y;
  body += "<g class=\"lane\" id=\"lane-" + std::to_string(index) + "\">\n";
  body += "<rect x=\"" + fixed(Svg::kX0) + "\" y=\"" + fixed(y) + "\" width=\"" +
          fixed(Svg::kPlot) + "\" height=\"" + fixed(Svg::kBand) +
          "\" fill=\"#fafafa\" stroke=\"#eee\"/>\n";
  body += "<text x=\"10\" y=\"" + fixed(y + 16) + "\" font-weight=\"bold\">" +
          xml_escape(spec.name) + "</text>\n";
  body += "<text x=\"10\" y=\"" + fixed(y + 31) + "\" font-size=\"11\" fill=\"#555\">" +
          xml_escape(spec.plan + ", " + std::to_string(spec.shares) +
                     (spec.shares == 1 ? " share" : " shares") + ", " +
                     std::to_string(lane.requests.size()) + " req") +
          "</text>\n";
  body += "<g class=\"requests\">\n";
  if (lane.requests.size() <= Svg::kDetailRequests) {
    svg_requests(svg, lane);
  } else {
    svg_requests_aggregated(svg, lane);
  }
  body += "</g>\n";
  svg.y += Svg::kBand + 2;
  svg_balances(svg, lane);
  body += "</g>\n";
  svg.y += Svg::kBalanceBand + 14;
}

// Each request a line: thin while it waits, thick in service, on rows enough for the most alive at
// once (up to 15), so that rows rarely overlap.
void Picture::svg_requests(Svg& svg, const Lane& lane) const {
  const int k = svg.k;
  const double y = svg.y;
  const std::int64_t end = svg.end;
  std::vector<std::pair<std::int64_t, int>> events;
  for (const std::uint32_t q : lane.requests) {
    const Request& r = requests_[q];
    events.emplace_back(r.arrived, 1);
    events.emplace_back(r.completed >= 0 ? r.completed : r.withdrawn >= 0 ? r.withdrawn : end, -1);
  }
  std::sort(events.begin(), events.end());
  int alive = 0;
  int most = 1;
  for (const auto& e : events) most = std::max(most, alive += e.second);
  // At least four, so that a lone request is a bar and not a block.
  const int rows = std::clamp(most, 4, 15);
  const double row_h = (Svg::kBand - 4) / rows;
  std::vector<Strokes> waiting(static_cast<std::size_t>(k + 2));
  std::vector<Strokes> service(static_cast<std::size_t>(k + 1));
  Strokes withdrawn;  // a tick where each withdrawn request left its queue
  for (std::size_t i = 0; i < lane.requests.size(); ++i) {
    const Request& r = requests_[lane.requests[i]];
    const double ry = y + 2 + row_h * (static_cast<double>(i % rows) + 0.5);
    const std::int64_t d = waited_until(r, end);
    const double xa = svg.x_of(r.arrived);
    const double xd = svg.x_of(d);
    waiting[static_cast<std::size_t>(r.cls + 1)].segment_h(xa, ry, std::max(xd - xa, 0.6));
    if (r.withdrawn >= 0) withdrawn.segment_v(xd, ry - row_h * 0.45, row_h * 0.9);
    if (r.dispatched < 0) continue;
    const double xc = svg.x_of(r.completed < 0 ? end : r.completed);
    service[static_cast<std::size_t>(r.cls)].segment_h(xd, ry, std::max(xc - xd, 1.0));
  }
  const double thin = std::clamp(row_h * 0.3, 0.6, 2.0);
  const double thick = std::clamp(row_h * 0.8, 1.0, 8.0);
  for (int c = -1; c <= k; ++c)
    waiting[static_cast<std::size_t>(c + 1)].emit(svg.body, tint(c, k), thin);
  for (int c = 0; c <= k; ++c)
    service[static_cast<std::size_t>(c)].emit(svg.body, colour(c, k), thick);
  if (!withdrawn.d.empty()) {
    svg.body += "<g class=\"withdrawals\">\n";
    withdrawn.emit(svg.body, kWithdrawnColour, std::clamp(row_h * 0.25, 0.8, 1.5));
    svg.body += "</g>\n";
  }
}

// Time-averaged counts per bin: requests waiting, by the class they went out under (grey: still
// queued at the stop), scaled to the lane's busiest bin; and in a strip at the bottom, the share
// of each class among the requests in service.
void Picture::svg_requests_aggregated(Svg& svg, const Lane& lane) const {
  const int k = svg.k;
  const double y = svg.y;
  const std::int64_t end = svg.end;
  constexpr std::size_t kBins = Svg::kBins;
  std::vector<Coverage> waiting(static_cast<std::size_t>(k + 2), Coverage(kBins));
  std::vector<Coverage> service(static_cast<std::size_t>(k + 1), Coverage(kBins));
  for (const std::uint32_t q : lane.requests) {
    const Request& r = requests_[q];
    const std::int64_t d = waited_until(r, end);
    waiting[static_cast<std::size_t>(r.cls + 1)].add(svg.bin_of(r.arrived), svg.bin_of(d));
    if (r.dispatched >= 0) {
      service[static_cast<std::size_t>(r.cls)].add(svg.bin_of(d),
                                                   svg.bin_of(r.completed < 0 ? end : r.completed));
    }
  }
  std::vector<std::vector<double>> w;
  std::vector<std::vector<double>> s;
  for (const Coverage& c : waiting) w.push_back(c.values());
  for (const Coverage& c : service) s.push_back(c.values());
  double most = 0;
  for (std::size_t b = 0; b < kBins; ++b) {
    double total = 0;
    for (const auto& col : w) total += col[b];
    most = std::max(most, total);
  }
  const double area = Svg::kBand - Svg::kStrip - 4;
  std::vector<Strokes> wpaths(w.size());
  std::vector<Strokes> spaths(s.size());
  for (std::size_t b = 0; b < kBins; ++b) {
    const double x = Svg::bin_x(b);
    double bottom = y + Svg::kBand - Svg::kStrip - 2;
    for (std::size_t c = 0; c < w.size() && most > 0; ++c) {
      const double h = area * w[c][b] / most;
      if (h < 0.05) continue;
      wpaths[c].segment_v(x, bottom, -h);
      bottom -= h;
    }
    double total = 0;
    for (const auto& col : s) total += col[b];
    if (total <= 0) continue;
    bottom = y + Svg::kBand - 1;
    for (std::size_t c = 0; c < s.size(); ++c) {
      const double h = Svg::kStrip * s[c][b] / total;
      if (h < 0.05) continue;
      spaths[c].segment_v(x, bottom, -h);
      bottom -= h;
    }
  }
  for (int c = -1; c <= k; ++c)
    wpaths[static_cast<std::size_t>(c + 1)].emit(svg.body, tint(c, k), Svg::kBin);
  for (int c = 0; c <= k; ++c)
    spaths[static_cast<std::size_t>(c)].emit(svg.body, colour(c, k), Svg::kBin);
  svg.body += "<text x=\"" + fixed(Svg::kX1 - 4) + "\" y=\"" + fixed(y + 11) +
              "\" font-size=\"10\" fill=\"#777\" text-anchor=\"end\">" +
              xml_escape("aggregated: queue depth by class, peak " + decimal(std::round(most)) +
                         "; strip: class mix in service") +
              "</text>\n";
}

// One line a held class, refilling at its rate between samples, up to its cap, on a scale from
// the lowest balance (or 0) to the highest (or the cap, or 1 credit).
void Picture::svg_balances(Svg& svg, const Lane& lane) const {
  std::string& body = svg.body;
  const double y = svg.y;
  body += "<g class=\"balances\">\n";
  body += "<rect x=\"" + fixed(Svg::kX0) + "\" y=\"" + fixed(y) + "\" width=\"" +
          fixed(Svg::kPlot) + "\" height=\"" + fixed(Svg::kBalanceBand) +
          "\" fill=\"#fff\" stroke=\"#eee\"/>\n";
  if (lane.held.empty()) {
    body +=
        "<text x=\"" + fixed(Svg::kX0 + 6) + "\" y=\"" + fixed(y + 20) +
        "\" font-size=\"11\" fill=\"#777\">no buckets: the plan holds no metered class</text>\n";
    body += "</g>\n";
    return;
  }
  double lo = 0;
  double hi = 1;
  for (std::size_t h = 0; h < lane.held.size(); ++h) {
    hi = std::max(hi, lane.cap[h]);
    for (const std::int64_t v : lane.samples.value[h]) {
      lo = std::min(lo, static_cast<double>(v) / 1e6);
      hi = std::max(hi, static_cast<double>(v) / 1e6);
    }
  }
  const double top = y + 3;
  const double height = Svg::kBalanceBand - 6;
  const auto y_of = [&](double b) { return top + height * (hi - b) / (hi - lo); };
  body += "<path stroke=\"#c00\" stroke-dasharray=\"3,2\" d=\"M" + fixed(Svg::kX0) + "," +
          fixed(y_of(1)) + "H" + fixed(Svg::kX1) + "\"/>\n";
  if (lo < 0) {
    body += "<path stroke=\"#bbb\" d=\"M" + fixed(Svg::kX0) + "," + fixed(y_of(0)) + "H" +
            fixed(Svg::kX1) + "\"/>\n";
  }
  body += "<text x=\"" + fixed(Svg::kX0 - 4) + "\" y=\"" + fixed(top + 8) +
          "\" font-size=\"10\" fill=\"#777\" text-anchor=\"end\">" + xml_escape(decimal(hi)) +
          "</text>\n";
  body += "<text x=\"" + fixed(Svg::kX0 - 4) + "\" y=\"" + fixed(top + height) +
          "\" font-size=\"10\" fill=\"#777\" text-anchor=\"end\">" + xml_escape(decimal(lo)) +
          "</text>\n";
  for (std::size_t h = 0; h < lane.held.size(); ++h) {
    svg_balance_line(svg, lane, h, top, height, lo, hi);
  }
  body += "</g>\n";
}

// Held class `held`'s balance: exact while there are few samples, else each bin's range.
void Picture::svg_balance_line(Svg& svg, const Lane& lane, std::size_t held, double top,
                               double height, double lo, double hi) const {
  const std::size_t h = held;
  const int k = svg.k;
  const std::int64_t end = svg.end;
  const auto y_of = [&](double b) { return top + height * (hi - b) / (hi - lo); };
  const Samples& smp = lane.samples;
  const double rate = lane.rate[h] / 1e6;  // credits per microsecond
  const double cap = lane.cap[h];
  const auto refill = [&](double b, std::int64_t from, std::int64_t to) {
    return std::min(cap, b + rate * static_cast<double>(to - from));
  };
  if (smp.t.size() <= Svg::kBins) {
    // Exact: each sample, the refill toward the next with its corner where the bucket fills, and
    // the step the event made.
    std::string d;
    const auto point = [&](std::int64_t t, double b) {
      d += d.empty() ? 'M' : 'L';
      append_fixed(d, svg.x_of(t));
      d += ',';
      append_fixed(d, y_of(b));
    };
    std::int64_t pt = 0;
    double pb = cap;
    point(0, cap);
    const auto refill_to = [&](std::int64_t t) {
      if (pb < cap && rate > 0) {
        const double full = static_cast<double>(pt) + (cap - pb) / rate;
        if (full < static_cast<double>(t)) point(static_cast<std::int64_t>(full), cap);
      }
      point(t, refill(pb, pt, t));
    };
    for (std::size_t i = 0; i < smp.t.size(); ++i) {
      refill_to(smp.t[i]);
      pb = static_cast<double>(smp.value[h][i]) / 1e6;
      pt = smp.t[i];
      point(pt, pb);
    }
    refill_to(end);
    svg.body += "<path fill=\"none\" stroke=\"" + std::string(colour(lane.held[h], k)) +
                "\" stroke-width=\"1.3\" d=\"" + d + "\"/>\n";
    return;
  }
  // Many samples: each bin's range, from the balance entering it, every sample in it and the
  // refill before each, to the balance leaving it.
  Strokes bars;
  std::size_t i = 0;
  std::int64_t pt = 0;
  double pb = cap;
  for (std::size_t b = 0; b < Svg::kBins; ++b) {
    const auto t0 = static_cast<std::int64_t>(svg.span * static_cast<double>(b) / Svg::kBins);
    const auto t1 = static_cast<std::int64_t>(svg.span * static_cast<double>(b + 1) / Svg::kBins);
    double mn = refill(pb, pt, t0);
    double mx = mn;
    while (i < smp.t.size() && smp.t[i] < t1) {
      const double before = refill(pb, pt, smp.t[i]);
      pb = static_cast<double>(smp.value[h][i]) / 1e6;
      pt = smp.t[i];
      mn = std::min({mn, before, pb});
      mx = std::max({mx, before, pb});
      ++i;
    }
    const double after = refill(pb, pt, t1);
    mn = std::min(mn, after);
    mx = std::max(mx, after);
    const double ya = y_of(mx);
    bars.segment_v(Svg::bin_x(b), ya, std::max(y_of(mn) - ya, 1.0));
  }
  bars.emit(svg.body, colour(lane.held[h], k), Svg::kBin);
}

}  // namespace creditloop::sim
