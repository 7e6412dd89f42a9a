// creditloop-server: an HTTP server and scheduling proxy whose every request goes through a
// creditloop runtime. See docs/server.md.
//
// Exit status: 0 stopped cleanly; 1 the deadline passed with requests unanswered; 2 a bad
// command line; 3 a bad configuration, a listener that could not be opened, or a fleet server id
// that a live server holds.
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <variant>

#include <CLI/CLI.hpp>

#include "common/command_line.hpp"
#include "server.hpp"

int main(int argc, char** argv) {
  CLI::App app{"creditloop-server: tenants' requests, scheduled by creditloop"};
  creditloop::server::ServerOptions options;
  bool check_only = false;
  app.add_option("-c,--config", options.config_path, "JSON configuration file")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_flag("--fifo", options.fifo,
               "serve in arrival order with the same room (a baseline for load tests)");
  app.add_flag("--check", check_only, "validate the configuration and exit");
  if (const std::optional<int> status = creditloop::tools::parse_command_line(app, argc, argv)) {
    return *status;
  }
  if (check_only) {
    const auto r = creditloop::server::load_config(options.config_path);
    if (const auto* why = std::get_if<creditloop::tools::Refusal>(&r)) {
      std::fprintf(stderr, "creditloop-server: %s\n", why->message.c_str());
      return 3;
    }
    return 0;
  }
  // Signals are taken by the server's own handler; before it is set up (and in every thread it
  // starts) they must not kill the process.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A file-size limit (RLIMIT_FSIZE) reached by a buffered body's temporary file must fail that
  // write (EFBIG, answered 500), not end the process.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    creditloop::server::Server server(std::move(options));
    return server.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "creditloop-server: %s\n", e.what());
    return 3;
  }
}
