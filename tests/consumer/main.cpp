// Proves an installed creditloop is usable: one participant, one request, one dispatch.
#include <creditloop/core.hpp>

#include <cstdio>

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
  std::puts("consumer ok");
  return 0;
}
