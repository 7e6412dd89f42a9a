// Every entry point of the C API with every allocation failing: each answers a status (NO_MEMORY
// where it needed memory, with nothing changed), and no exception reaches the caller, which in C
// would be a terminate. The global operator new is replaced to fail on demand.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include <openssl/crypto.h>

#include "creditloop/creditloop.h"

namespace {

bool failing = false;  // single-threaded: the test's one thread alone allocates
int failures = 0;
int crypto_allocations = 0;  // libcrypto's own, through CRYPTO_set_mem_functions

void* crypto_malloc(std::size_t size, const char*, int) {
  ++crypto_allocations;
  return std::malloc(size);
}
void* crypto_realloc(void* p, std::size_t size, const char*, int) {
  ++crypto_allocations;
  return std::realloc(p, size);
}
void crypto_free(void* p, const char*, int) { std::free(p); }

void check(bool ok, const char* what, int line) {
  if (!ok) {
    std::fprintf(stderr, "capi_throwing_test.cpp:%d: %s\n", line, what);
    ++failures;
  }
}
#define CHECK(cond) check((cond), #cond, __LINE__)

// Runs `call` with allocation failing; an exception out of it is a failure of this test, not a
// crash, so that the report names the entry point.
template <class F>
creditloop_status failing_alloc(const char* name, F&& call) {
  failing = true;
  creditloop_status status = CREDITLOOP_OK;
  try {
    status = call();
  } catch (...) {
    std::fprintf(stderr, "%s let an exception out\n", name);
    ++failures;
  }
  failing = false;
  return status;
}

}  // namespace

void* operator new(std::size_t size) {
  if (failing) throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

// The configuration is parsed (which allocates, and is refused), then a key is looked up (which
// allocates nothing, neither here nor in libcrypto).
creditloop_config* parse_and_look_up() {
  static const char file[] =
      R"({"plans": {"pro": {"P1": {"rate": 2, "burst": 4}}, "lite": {"P1": {"rate": 1, "burst": 2}}},
          "tenants": [{"name": "alice", "key": "alice-key-1", "plan": "pro"}]})";
  creditloop_config* config = nullptr;
  char message[128];
  CHECK(failing_alloc("creditloop_config_parse_json", [&] {
          return creditloop_config_parse_json(file, sizeof file - 1, &config, message,
                                              sizeof message);
        }) == CREDITLOOP_NO_MEMORY);
  CHECK(config == nullptr);
  CHECK(creditloop_config_parse_json(file, sizeof file - 1, &config, message, sizeof message) ==
        CREDITLOOP_OK);
  std::size_t index = 0;
  // The lookup a request makes allocates nothing, neither here nor in libcrypto: it succeeds with
  // allocation failing.
  const int crypto_before = crypto_allocations;
  CHECK(failing_alloc("creditloop_config_find_key", [&] {
          return creditloop_config_find_key(config, "alice-key-1", 11, &index);
        }) == CREDITLOOP_OK);
  CHECK(index == 0);
  CHECK(failing_alloc("creditloop_config_find_key", [&] {
          return creditloop_config_find_key(config, "another-key", 11, &index);
        }) == CREDITLOOP_NOT_FOUND);
  CHECK(crypto_allocations == crypto_before);
  return config;
}

// Every entry point of a core built from `config`, and the configuration's own while it lives.
void check_core(creditloop_config* config) {
  char message[128];
  creditloop_core* core = nullptr;
  CHECK(failing_alloc("creditloop_core_new", [&] {
          return creditloop_core_new(config, &core, message, sizeof message);
        }) == CREDITLOOP_NO_MEMORY);
  CHECK(creditloop_core_new(config, &core, message, sizeof message) == CREDITLOOP_OK);
  creditloop_participant alice{};
  creditloop_participant bob{};
  CHECK(failing_alloc("creditloop_add", [&] {
          return creditloop_add(core, "alice", "pro", 1, 0, &alice);
        }) == CREDITLOOP_NO_MEMORY);
  CHECK(creditloop_size(core) == 0);
  CHECK(creditloop_add(core, "alice", "pro", 1, 0, &alice) == CREDITLOOP_OK);
  CHECK(creditloop_add(core, "bob", "lite", 1, 0, &bob) == CREDITLOOP_OK);

  // No reserve(): the removal's bookkeeping has no room yet and must allocate.
  CHECK(failing_alloc("creditloop_remove", [&] {
          creditloop_request* back = nullptr;
          return creditloop_remove(core, alice, &back);
        }) == CREDITLOOP_NO_MEMORY);
  creditloop_participant found{};
  CHECK(creditloop_find(core, "alice", &found) == CREDITLOOP_OK);  // nothing changed
  CHECK(creditloop_participant_equal(found, alice));
  const creditloop_status replanned =
      failing_alloc("creditloop_replan", [&] { return creditloop_replan(core, bob, "pro", 2, 0); });
  CHECK(replanned == CREDITLOOP_OK || replanned == CREDITLOOP_NO_MEMORY);
  CHECK(failing_alloc("creditloop_find", [&] { return creditloop_find(core, "alice", &found); }) !=
        CREDITLOOP_BAD_ARGUMENT);
  CHECK(failing_alloc("creditloop_reserve", [&] { return creditloop_reserve(core, 1000, 1000); }) ==
        CREDITLOOP_NO_MEMORY);
  CHECK(failing_alloc("creditloop_config_check", [&] {
          return creditloop_config_check(config, message, sizeof message);
        }) != CREDITLOOP_BAD_ARGUMENT);
  CHECK(failing_alloc("creditloop_config_add_plan", [&] {
          return creditloop_config_add_plan(config, "gold");
        }) == CREDITLOOP_NO_MEMORY);
  CHECK(failing_alloc("creditloop_config_load", [&] {
          creditloop_config* loaded = nullptr;
          return creditloop_config_load("/nonexistent/creditloop.json", &loaded, message,
                                        sizeof message);
        }) == CREDITLOOP_NO_MEMORY);

  creditloop_request* back = nullptr;
  CHECK(creditloop_remove(core, alice, &back) == CREDITLOOP_OK);
  CHECK(creditloop_find(core, "alice", &found) == CREDITLOOP_NOT_FOUND);
  creditloop_core_free(core);
}

}  // namespace

int main() {
  // Before libcrypto's first allocation, or it refuses.
  CHECK(CRYPTO_set_mem_functions(crypto_malloc, crypto_realloc, crypto_free) == 1);
  creditloop_config* config = parse_and_look_up();
  check_core(config);
  creditloop_config_free(config);
  if (failures != 0) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::puts("capi throwing: all checks passed");
  return 0;
}
