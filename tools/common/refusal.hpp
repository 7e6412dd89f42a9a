#pragma once
// How a tool says no to its input: the one parse-result type of every tool here (the simulator's
// scenarios, captures and plans; the server's configuration and query strings; the terminal
// view's URLs and samples; the demo backend's requests).

#include <exception>
#include <string>
#include <utility>
#include <variant>

namespace creditloop::tools {

/// Why an input was refused: one line naming the place at fault ("arrivals[1].count: must be
/// ...", "cap.jsonl:7: arrive: ...").
struct Refusal {
  std::string message;
};

/// A parse's outcome: the value, or why its input was refused. A tool's parsers return it and
/// never let an exception out for bad input.
template <class T>
using Parsed = std::variant<T, Refusal>;

/// Refuses with "where: problem", for a parser written as a straight list of checks: its entry
/// point catches the Refusal and returns it as its Parsed.
[[noreturn]] inline void refuse(const std::string& where, const std::string& problem) {
  throw Refusal{where + ": " + problem};
}

/// Runs `parse`, a parser that refuses by throwing (refuse()), and returns what it returns or its
/// Refusal. Any other exception (a library's own, such as a JSON type error) is a Refusal too:
/// "context: what it says".
template <class T, class F>
[[nodiscard]] Parsed<T> refusing(const char* context, F&& parse) {
  try {
    return std::forward<F>(parse)();
  } catch (const Refusal& refusal) {
    return refusal;
  } catch (const std::exception& e) {
    return Refusal{std::string(context) + ": " + e.what()};
  }
}

}  // namespace creditloop::tools
