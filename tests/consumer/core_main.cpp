// Proves an installed creditloop::core is usable on its own, without threads: one participant,
// one request, one dispatch, one completion.
#include <creditloop/core.hpp>
#include <creditloop/version.hpp>

#include <cstdio>

static_assert(CREDITLOOP_VERSION >= 200, "the installed version header is this release's");

int main() {
  creditloop::Core core(creditloop::reference_config());
  auto alice = core.add("alice", "pro", 1, 0);
  if (!alice) return 1;
  creditloop::RequestHook request;
  if (!core.submit(*alice, request, 0)) return 2;
  if (!core.begin_turn(0)) return 3;
  auto d = core.visit(0);
  if (!d || d->request != &request || d->out != 0) return 4;
  if (!core.complete(d->ticket, 0.5, 1)) return 5;
  std::printf("core consumer ok (creditloop %s)\n", CREDITLOOP_VERSION_STRING);
  return 0;
}
