// A creditloop-server configuration parsed from its text, for the tests of one field: the
// configuration it gives (a refusal is then the test's failure), or the refusal's message.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "config.hpp"

namespace creditloop::server::test {

inline ServerConfig accepted_config(const std::string& text) {
  auto parsed = parse_config(text);
  if (const auto* refusal = std::get_if<tools::Refusal>(&parsed)) {
    ADD_FAILURE() << text << ": " << refusal->message;
    return {};
  }
  return std::get<ServerConfig>(std::move(parsed));
}

/// "(accepted)" when there is none.
inline std::string refusal_of(const std::string& text) {
  auto parsed = parse_config(text);
  const auto* refusal = std::get_if<tools::Refusal>(&parsed);
  return refusal == nullptr ? "(accepted)" : refusal->message;
}

}  // namespace creditloop::server::test
