// The interactive page: the template compiled in (picture.html), with the run's data in it.
#include <stdexcept>
#include <string_view>

#include "common/json_text.hpp"
#include "picture_internal.hpp"
#include "picture_template.hpp"

namespace creditloop::sim {

using tools::json_string;

namespace {

// The page with `data` where its marker is. Inside <script> nothing may look like "</script>":
// JSON has '<' only within strings, where its escape reads back the same.
std::string page_with(const std::string& data) {
  constexpr std::string_view kMarker = "/*@CREDITLOOP_DATA@*/";
  const std::string_view page = kPictureHtml;
  const std::size_t at = page.find(kMarker);
  if (at == std::string_view::npos) throw std::logic_error("picture.html has no data marker");
  std::string safe;
  safe.reserve(data.size());
  for (const char ch : data) {
    if (ch == '<') {
      safe += "\\u003c";
    } else {
      safe += ch;
    }
  }
  std::string out;
  out.reserve(page.size() + safe.size());
  out.append(page.substr(0, at));
  out += safe;
  out.append(page.substr(at + kMarker.size()));
  return out;
}

}  // namespace

std::string Picture::html(const RunReport& report) const { return page_with(data_json(report)); }

std::string Picture::pair_html(const std::string& title, const Run& first, const Run& second) {
  std::string data = "{\"format\":\"creditloop-picture-pair/1\",\"title\":";
  data += json_string(title);
  data += ",\"runs\":[";
  bool comma = false;
  for (const Run* run : {&first, &second}) {
    if (comma) data += ',';
    comma = true;
    data += "{\"label\":";
    data += json_string(run->label);
    data += ",\"run\":";
    data += run->picture->data_json(*run->report);
    data += '}';
  }
  data += "]}";
  return page_with(data);
}

}  // namespace creditloop::sim
