// --html and --svg: the pictures of a run, and what they leave as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sim_process.hpp"

namespace creditloop::sim_test {
namespace {

class SimPictures : public SimTest {};

// ---- --html and --svg: pictures of the run ------------------------------------------------------

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Checks that every element is closed in order, as an XML reader needs; returns the first
// problem, or "" when there is none.
std::string xml_problem(const std::string& text) {
  std::vector<std::string> open;
  for (std::size_t at = text.find('<'); at != std::string::npos; at = text.find('<', at + 1)) {
    const std::size_t end = text.find('>', at);
    if (end == std::string::npos) return "unterminated tag";
    const std::string tag = text.substr(at + 1, end - at - 1);
    if (tag.empty() || tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return "</" + tag.substr(1) + "> closes nothing open";
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
  }
  return open.empty() ? "" : "<" + open.back() + "> is never closed";
}

// The text of the <g> element with the given id, from its start tag to its end tag.
std::string group(const std::string& svg, const std::string& id) {
  const std::size_t named = svg.find(" id=\"" + id + "\"");
  if (named == std::string::npos) return "";
  const std::size_t at = svg.rfind("<g", named);
  if (at == std::string::npos) return "";
  int depth = 0;
  for (std::size_t i = at; i < svg.size(); ++i) {
    if (svg.compare(i, 2, "<g") == 0) ++depth;
    if (svg.compare(i, 4, "</g>") == 0 && --depth == 0) return svg.substr(at, i + 4 - at);
  }
  return "";
}

TEST_F(SimPictures, PicturesLeaveStandardOutputAsItWas) {
  for (const char* name : {"quickstart.json", "shares.json", "heavy_work.json",
                           "descend_climb.json", "bounded_wait.json", "interleave.json"}) {
    for (const std::vector<std::string>& mode :
         {std::vector<std::string>{}, std::vector<std::string>{"--reasons"},
          std::vector<std::string>{"--table"}}) {
      std::vector<std::string> plain = mode;
      plain.push_back(example(name));
      std::vector<std::string> drawn = mode;
      const fs::path html = dir_ / "run.html";
      const fs::path svg = dir_ / "run.svg";
      drawn.insert(drawn.end(), {"--html", html.string(), "--svg=" + svg.string(), example(name)});
      const Output a = run_sim(plain);
      const Output b = run_sim(drawn);
      ASSERT_EQ(b.status, 0) << name << b.err;
      EXPECT_EQ(b.err, "");
      EXPECT_EQ(a.out, b.out) << name << ": the pictures changed standard output";
      ASSERT_TRUE(fs::is_regular_file(html));
      ASSERT_TRUE(fs::is_regular_file(svg));
      // Written whole and moved into place: no temporary is left beside them.
      EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 2);
      fs::remove(html);
      fs::remove(svg);
    }
  }
}

TEST_F(SimPictures, HtmlIsOnePageThatNeedsNothingElse) {
  const fs::path html = dir_ / "q.html";
  ASSERT_EQ(run_sim({"--html", html.string(), example("quickstart.json")}).status, 0);
  const std::string page = slurp(html);
  EXPECT_EQ(page.rfind("<!doctype html>", 0), 0u);
  EXPECT_EQ(page.find("/*@CREDITLOOP_DATA@*/"), std::string::npos) << "the data went in";
  EXPECT_NE(page.find("<canvas"), std::string::npos);
  EXPECT_NE(page.find("window.creditloopView"), std::string::npos);
  // Nothing from elsewhere: no linked script, style, font or image.
  for (const char* outside : {" src=", "<link", "@import", "url(", "http://", "https://"}) {
    EXPECT_EQ(page.find(outside), std::string::npos) << outside;
  }
  // The data: the run's counts, as the trace has them.
  const std::string open = "<script id=\"creditloop-data\" type=\"application/json\">";
  const std::size_t from = page.find(open);
  ASSERT_NE(from, std::string::npos);
  const std::size_t to = page.find("</script>", from);
  const json data = json::parse(page.substr(from + open.size(), to - from - open.size()));
  EXPECT_EQ(data["format"], "creditloop-picture/1");
  EXPECT_EQ(data["title"], "quickstart.json");
  ASSERT_EQ(data["participants"].size(), 2u);
  EXPECT_EQ(data["participants"][0]["name"], "alice");
  EXPECT_EQ(data["participants"][0]["a"].size(), 40u);
  EXPECT_EQ(data["participants"][1]["a"].size(), 3u);
  const Trace t = trace_of(example("quickstart.json"));
  EXPECT_EQ(data["passes"]["t"].size(), t.events("pass").size());
}

TEST_F(SimPictures, HtmlKeepsNamesInsideItsScript) {
  // A participant named like the end of a script element must not end the data early.
  json s = json::parse(kContractExample);
  s["participants"][0]["name"] = "</script><b>x";
  for (json& a : s["arrivals"]) {
    if (a["participant"] == "alice") a["participant"] = "</script><b>x";
  }
  const fs::path html = dir_ / "names.html";
  ASSERT_EQ(run_sim({"--summary", "--html", html.string(), write("n.json", s.dump())}).status, 0);
  const std::string page = slurp(html);
  EXPECT_EQ(count_of(page, "</script>"), 2u);  // the data's and the code's
  EXPECT_NE(page.find("\\u003c/script>\\u003cb>x"), std::string::npos);
}

TEST_F(SimPictures, SvgShowsLanesPassesLegendAndHeader) {
  const fs::path svg_path = dir_ / "q.svg";
  ASSERT_EQ(run_sim({"--summary", "--svg", svg_path.string(), example("quickstart.json")}).status,
            0);
  const std::string svg = slurp(svg_path);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(xml_problem(svg), "");
  for (const char* id : {"header", "legend", "axis", "passes", "lane-0", "lane-1"}) {
    EXPECT_EQ(count_of(svg, std::string("id=\"") + id + "\""), 1u) << id;
  }
  EXPECT_EQ(count_of(svg, "class=\"lane\""), 2u);
  EXPECT_EQ(count_of(svg, "class=\"requests\""), 2u);
  EXPECT_EQ(count_of(svg, "class=\"balances\""), 2u);
  const std::string header = group(svg, "header");
  for (const char* text : {"quickstart.json", "plan pro:", "P1 2/s burst 4",
                           "plan lite:", "alice (pro, 1 share)", "bob (lite, 1 share)", "1 slot"}) {
    EXPECT_NE(header.find(text), std::string::npos) << text;
  }
  const std::string legend = group(svg, "legend");
  for (const char* text : {">P1<", ">P2<", ">P3 (unmetered)<", "one credit", "waiting"}) {
    EXPECT_NE(legend.find(text), std::string::npos) << text;
  }
  // One mark a pass (43 passes, few enough to draw each), and in alice's lane one waiting and
  // one service segment a request.
  const Trace t = trace_of(example("quickstart.json"));
  EXPECT_EQ(count_of(group(svg, "passes"), "M"), t.events("pass").size());
  const std::string alice = group(svg, "lane-0");
  const std::string requests = alice.substr(0, alice.find("class=\"balances\""));
  EXPECT_EQ(count_of(requests, "M"), 2 * 40u);
  EXPECT_NE(alice.find(">alice<"), std::string::npos);
}

TEST_F(SimPictures, PicturesShowEachWithdrawal) {
  const fs::path svg_path = dir_ / "h.svg";
  const fs::path html_path = dir_ / "h.html";
  ASSERT_EQ(run_sim({"--summary", "--svg", svg_path.string(), "--html", html_path.string(),
                     example("hang_up.json")})
                .status,
            0);
  const std::size_t withdrawn = trace_of(example("hang_up.json")).events("withdraw").size();
  const std::string svg = slurp(svg_path);
  EXPECT_EQ(xml_problem(svg), "");
  // One tick a withdrawal, in impatient's lane alone.
  const std::string impatient = group(svg, "lane-1");
  const auto at = impatient.find("class=\"withdrawals\"");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(count_of(impatient.substr(at, impatient.find("</g>", at) - at), "M"), withdrawn);
  EXPECT_EQ(group(svg, "lane-0").find("withdrawals"), std::string::npos);
  EXPECT_NE(group(svg, "legend").find("withdrawn while queued"), std::string::npos);
  // The page's data keeps them apart from the lane's requests.
  const std::string html = slurp(html_path);
  EXPECT_NE(html.find("\"xreq\":["), std::string::npos);

  const fs::path plain = dir_ / "q.svg";
  ASSERT_EQ(run_sim({"--summary", "--svg", plain.string(), example("quickstart.json")}).status, 0);
  EXPECT_EQ(slurp(plain).find("withdraw"), std::string::npos);
}

TEST_F(SimPictures, SvgStaysSmallFor100000Requests) {
  const fs::path svg_path = dir_ / "big.svg";
  const Output o = run_sim(
      {"--summary", "--svg", svg_path.string(), write("big.json", many_requests(100000).dump())});
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string svg = slurp(svg_path);
  // The bound docs/pictures.md states: under 2 MB for 100,000 requests among 12 participants.
  EXPECT_LT(svg.size(), 2'000'000u);
  std::printf("SVG of 100000 requests: %zu bytes\n", svg.size());
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_EQ(count_of(svg, "class=\"lane\""), 12u);
  EXPECT_NE(svg.find("aggregated"), std::string::npos);
  EXPECT_NE(svg.find("100000 requests"), std::string::npos);
}

TEST_F(SimPictures, PicturePathsThatCannotBeWrittenStopTheRunFirst) {
  const std::string missing = (dir_ / "no" / "such" / "dir" / "x.html").string();
  const std::string good = (dir_ / "good.html").string();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--html", missing},
        std::vector<std::string>{"--svg", dir_.string()},
        std::vector<std::string>{"--html", good, "--svg", missing}}) {
    std::vector<std::string> all = args;
    all.push_back(example("quickstart.json"));
    const Output o = run_sim(all);
    EXPECT_EQ(o.status, 3) << o.err;
    EXPECT_EQ(o.out, "") << "nothing on standard output";
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_NE(o.err.find(args[args.size() - 1]), std::string::npos) << o.err;
    EXPECT_NE(o.err.find(args[args.size() - 2]), std::string::npos) << o.err;
    EXPECT_TRUE(fs::is_empty(dir_)) << "nothing else written";
  }
  // A bad scenario is found before any picture is started.
  const Output bad = run_sim({"--html", good, write("bad.json", "{}")});
  EXPECT_EQ(bad.status, 1);
  EXPECT_FALSE(fs::exists(good));
  // The command line.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{example("quickstart.json"), "--html"},
        std::vector<std::string>{"--svg=", example("quickstart.json")},
        std::vector<std::string>{"--check", "--html", good, example("quickstart.json")}}) {
    const Output o = run_sim(args);
    EXPECT_EQ(o.status, 2) << o.err;
    EXPECT_EQ(o.out, "");
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  }
  fs::remove(dir_ / "bad.json");
  EXPECT_TRUE(fs::is_empty(dir_));
  const Output help = run_sim({"--help"});
  EXPECT_NE(help.out.find("--html FILE"), std::string::npos);
  EXPECT_NE(help.out.find("--svg FILE"), std::string::npos);
}

TEST_F(SimPictures, PicturesRefuseRunsTooLargeToHoldBeforeWritingAnything) {
  json s = one_plan({"a"});
  s["arrivals"].push_back({{"at", 0}, {"participant", "a"}, {"count", 5'000'001}});
  const std::string html = (dir_ / "huge.html").string();
  const Output o = run_sim({"--html", html, write("huge.json", s.dump())});
  EXPECT_EQ(o.status, 2) << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_NE(o.err.find("5000000"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(html));
}

}  // namespace
}  // namespace creditloop::sim_test
