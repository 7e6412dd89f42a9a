/* creditloop/creditloop.h: the core's loop for C and every language with a C FFI, a C99 view of
 * creditloop::Core (core.hpp): the same decisions, the same errors, the same costs.
 *
 *  - Handles are opaque; ids and tickets are small values the caller copies; a request is a
 *    record the caller owns (creditloop_request), linked into queues without allocation or copy.
 *  - Every call that can fail returns a creditloop_status. No exception crosses: one inside (only
 *    an allocation failure can throw) becomes CREDITLOOP_NO_MEMORY with nothing changed.
 *  - Each function says whether it allocates; those on the request path (submit, dispatch,
 *    complete, withdraw, the readings) never do once creditloop_reserve() has been called.
 *  - Not thread-safe: every call on one core comes from one thread at a time. Time is always an
 *    argument, nanoseconds of a monotonic clock, never read here.
 *  - A stable ABI (versions, growing structs with their `size`, creditloop_* alone exported); a
 *    null handle is CREDITLOOP_BAD_ARGUMENT, never "nothing": a reading that returns a count
 *    returns CREDITLOOP_BAD_COUNT (or -1 for an int).
 *
 * Why: docs/design.md#the-c-api
 */
#ifndef CREDITLOOP_CREDITLOOP_H
#define CREDITLOOP_CREDITLOOP_H

#include <stddef.h>
#include <stdint.h>

#include "creditloop/version.hpp"

/* Every function of this API, exported from the shared object, whose other symbols are hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define CREDITLOOP_API __attribute__((visibility("default")))
#else
#define CREDITLOOP_API
#endif

/* The version this header belongs to: major * 10000 + minor * 100 + patch (0.2.0 is 200). */
#define CREDITLOOP_VERSION_NUMBER CREDITLOOP_VERSION

#ifdef __cplusplus
extern "C" {
#endif

/* 0 is success; every other value names one refusal, and a refused call changes nothing. */
typedef enum creditloop_status {
  CREDITLOOP_OK = 0,
  CREDITLOOP_UNKNOWN_PLAN = 1,
  CREDITLOOP_UNKNOWN_CLASS = 2,
  CREDITLOOP_UNKNOWN_PARTICIPANT = 3,
  CREDITLOOP_DUPLICATE_NAME = 4,
  CREDITLOOP_BAD_SHARES = 5,
  CREDITLOOP_BAD_RATE = 6,
  CREDITLOOP_BAD_BURST = 7,
  CREDITLOOP_BAD_COST = 8,
  CREDITLOOP_BAD_CLASSES = 9,
  CREDITLOOP_UNKNOWN_TICKET = 10,
  CREDITLOOP_STALE_TICKET = 11,
  CREDITLOOP_TOO_MANY_PARTICIPANTS = 12,
  CREDITLOOP_ALREADY_QUEUED = 13,
  CREDITLOOP_BAD_SCALE = 14,
  CREDITLOOP_NOT_QUEUED = 15,    /* withdraw: the request is not queued in this core */
  CREDITLOOP_IN_FLIGHT = 16,     /* withdraw: it was dispatched; complete it as usual */
  CREDITLOOP_NO_MEMORY = 17,     /* an allocation failed; nothing changed */
  CREDITLOOP_BAD_ARGUMENT = 18,  /* a null pointer, or a value outside its documented range */
  CREDITLOOP_BAD_CONFIG = 19,    /* a configuration refused: the message says which field */
  CREDITLOOP_NOT_SUPPORTED = 20, /* this build does not offer the call */
  CREDITLOOP_NOT_FOUND = 21      /* a lookup by name, or a reading that has no value */
} creditloop_status;

/* What a reading that returns a count returns for a null handle: never a count. */
#define CREDITLOOP_BAD_COUNT ((size_t)-1)

/* A short English description of `status` ("stale ticket"); never null. Allocates nothing. */
CREDITLOOP_API const char* creditloop_strerror(creditloop_status status);

/* The library's version, "MAJOR.MINOR.PATCH", and as CREDITLOOP_VERSION_NUMBER counts it: a
 * caller built with an older header runs with a library whose number is at least its own.
 * Allocate nothing. */
CREDITLOOP_API const char* creditloop_version(void);
CREDITLOOP_API unsigned creditloop_version_number(void);

/* The limits of units.hpp, for callers that check before calling. */
#define CREDITLOOP_MAX_CLASSES 7
#define CREDITLOOP_WHOLE_PLAN 1000000u
#define CREDITLOOP_NANO_PER_CREDIT 1000000000

/* A registered participant, and a dispatched request's ticket. Opaque values: copy them, compare
 * them with the functions below, never read their bytes. Their layout may change between
 * versions; their size will not. */
typedef struct creditloop_participant {
  uint64_t opaque[2];
} creditloop_participant;
typedef struct creditloop_ticket {
  uint64_t opaque[2];
} creditloop_ticket;

CREDITLOOP_API int creditloop_participant_equal(creditloop_participant a, creditloop_participant b);
CREDITLOOP_API int creditloop_ticket_equal(creditloop_ticket a, creditloop_ticket b);

/* A request, owned by the caller. Initialise it once with creditloop_request_init() before its
 * first submit; it may then be submitted again each time it is the caller's (after its
 * completion, withdrawal or hand-back). It must not move or be freed while it is the core's.
 * `user` is the caller's and never touched by the core. */
typedef struct creditloop_request {
  uint64_t internal_[8]; /* room for the core's hook (40 bytes now) to grow */
  void* user;
} creditloop_request;

/* Allocates nothing. */
CREDITLOOP_API void creditloop_request_init(creditloop_request* request, void* user);
/* Whether the request is the caller's (it may be submitted, moved or freed): 1 or 0, and -1 for
 * a null request. Allocates nothing. */
CREDITLOOP_API int creditloop_request_idle(const creditloop_request* request);
/* The next request of a chain handed back by creditloop_remove() or creditloop_take_all_queued(),
 * oldest first; null at its end. Each request of the chain is already the caller's: read the next
 * before submitting this one again, which rewrites its link. Allocates nothing. */
CREDITLOOP_API creditloop_request* creditloop_request_next(const creditloop_request* request);

/* ---- configuration ------------------------------------------------------------------------ */

/* Classes and plans (plan.hpp), and optionally tenants, as creditloop-server's file names them. */
typedef struct creditloop_config creditloop_config;

/* A configuration with `classes` metered classes (1..7) and no plan. Null if `classes` is out of
 * range or memory is short. Allocates. */
CREDITLOOP_API creditloop_config* creditloop_config_new(int classes);
/* Frees it; null is allowed. */
CREDITLOOP_API void creditloop_config_free(creditloop_config* config);
/* Adds plan `name` holding no class yet (DUPLICATE_NAME if it exists). Allocates. */
CREDITLOOP_API creditloop_status creditloop_config_add_plan(creditloop_config* config,
                                                            const char* name);
/* Gives plan `name` class `cls` (0 is P1) with `rate` credits/s and `burst` credits per share.
 * The values are checked when a core is made from the configuration. Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_config_set_class(creditloop_config* config,
                                                             const char* name, int cls, double rate,
                                                             double burst);

/* Parses creditloop-server's JSON (docs/server.md): `classes`, `plans` and `tenants` (name,
 * key, plan, shares, queue_limit, queue_timeout_ms) are read and checked by the server's own
 * reader (config/tenant_file.cpp): an unknown field in a plan or a tenant is refused, a tenant
 * needs a key (`key`, `key_sha256`, `key_file`, `key_env`), `3.0` is not a whole number. The
 * server's other top-level fields (listen, proxy, fleet...) are left unread. A relative
 * `key_file` is taken from the working directory (creditloop_config_load takes it from the
 * file's). On BAD_CONFIG, `message` (when not null and `message_size` > 0) receives the reason
 * naming the field ("tenants[1].plan: unknown plan \"gold\""), truncated to fit and always
 * terminated; it never holds a key. Allocates. */
CREDITLOOP_API creditloop_status creditloop_config_parse_json(const char* text, size_t length,
                                                              creditloop_config** out,
                                                              char* message, size_t message_size);
/* The same from the file at `path`, as creditloop-server loads it: a relative `key_file` is
 * taken from the file's directory, `key_env` is read from the environment now. BAD_CONFIG names
 * the path when the file cannot be read ("/etc/x.json: cannot be read: Is a directory").
 * Allocates. */
CREDITLOOP_API creditloop_status creditloop_config_load(const char* path, creditloop_config** out,
                                                        char* message, size_t message_size);

/* The index (as creditloop_config_tenant counts) of the tenant whose key is the `length` bytes
 * at `key`, the bearer key a client presented: NOT_FOUND when no tenant has it. Compared as the
 * server compares, by SHA-256 digest, in constant time once found: O(1) expected, allocates
 * nothing, never copies the key. */
CREDITLOOP_API creditloop_status creditloop_config_find_key(const creditloop_config* config,
                                                            const char* key, size_t length,
                                                            size_t* index);

/* Checks the classes and plans as a core would. Message as above. Allocates. */
CREDITLOOP_API creditloop_status creditloop_config_check(const creditloop_config* config,
                                                         char* message, size_t message_size);

/* A tenant the JSON named. The strings belong to the configuration. May grow: set `size` to
 * sizeof(creditloop_tenant_config) before creditloop_config_tenant fills it. */
typedef struct creditloop_tenant_config {
  size_t size;
  const char* name;
  const char* plan;
  uint32_t shares;
  uint32_t queue_limit;      /* 0: none */
  uint64_t queue_timeout_ms; /* 0: none */
} creditloop_tenant_config;

/* Tenants parsed from JSON, in file order (CREDITLOOP_BAD_COUNT for a null configuration), and
 * the i-th of them (NOT_FOUND past the end; BAD_ARGUMENT when `out->size` is smaller than the
 * first version's struct). Classes: -1 for a null configuration. Allocate nothing. */
CREDITLOOP_API size_t creditloop_config_tenants(const creditloop_config* config);
CREDITLOOP_API creditloop_status creditloop_config_tenant(const creditloop_config* config, size_t i,
                                                          creditloop_tenant_config* out);
CREDITLOOP_API int creditloop_config_classes(const creditloop_config* config);

/* ---- the core ----------------------------------------------------------------------------- */

typedef struct creditloop_core creditloop_core;

/* A core over a copy of `config`'s classes and plans (its tenants are not registered: that is
 * the caller's, with creditloop_add). BAD_CONFIG with the message as above. Allocates. */
CREDITLOOP_API creditloop_status creditloop_core_new(const creditloop_config* config,
                                                     creditloop_core** out, char* message,
                                                     size_t message_size);
/* Frees the core; null is allowed. Requests still queued or in flight are the caller's again
 * (their records are not touched). */
CREDITLOOP_API void creditloop_core_free(creditloop_core* core);

/* Reserves room so that up to `participants` registrations and `in_flight` dispatches allocate
 * nothing more. Allocates. */
CREDITLOOP_API creditloop_status creditloop_reserve(creditloop_core* core, size_t participants,
                                                    size_t in_flight);

/* The core's metered classes; -1 for a null core. */
CREDITLOOP_API int creditloop_classes(const creditloop_core* core);

/* Registers `name` with `plan` and `shares` at `now`; its buckets start full. Errors:
 * UNKNOWN_PLAN, DUPLICATE_NAME, BAD_SHARES, TOO_MANY_PARTICIPANTS. Allocates (amortized). */
CREDITLOOP_API creditloop_status creditloop_add(creditloop_core* core, const char* name,
                                                const char* plan, uint32_t shares, int64_t now,
                                                creditloop_participant* out);
/* Unregisters `p`; its queued requests come back in `*handed_back` as a chain (oldest first,
 * creditloop_request_next), each the caller's again; null when none. In-flight ones stay
 * completable. `handed_back` may be null only if the caller knows the queue is empty
 * (BAD_ARGUMENT otherwise, nothing changed). Allocates only for removals beyond what
 * creditloop_reserve() covered (NO_MEMORY then, with `p` still registered). */
CREDITLOOP_API creditloop_status creditloop_remove(creditloop_core* core, creditloop_participant p,
                                                   creditloop_request** handed_back);
/* A new plan and share count (Core::replan). Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_replan(creditloop_core* core, creditloop_participant p,
                                                   const char* plan, uint32_t shares, int64_t now);
/* A fraction of its plan in millionths (Core::scale). Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_scale(creditloop_core* core, creditloop_participant p,
                                                  uint32_t millionths, int64_t now);
/* The participant registered as `name`: NOT_FOUND if none. Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_find(const creditloop_core* core, const char* name,
                                                 creditloop_participant* out);
/* Participants registered, participants with queued requests, and requests in flight;
 * CREDITLOOP_BAD_COUNT for a null core. Allocate nothing. */
CREDITLOOP_API size_t creditloop_size(const creditloop_core* core);
CREDITLOOP_API size_t creditloop_waiting(const creditloop_core* core);
CREDITLOOP_API size_t creditloop_in_flight(const creditloop_core* core);

/* ---- requests ----------------------------------------------------------------------------- */

/* Appends `request` to `p`'s queue. Errors: UNKNOWN_PARTICIPANT, ALREADY_QUEUED. O(1).
 * Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_submit(creditloop_core* core, creditloop_participant p,
                                                   creditloop_request* request, int64_t now);

/* Takes a queued request back: it leaves its queue and takes no credit, and is the caller's
 * again. Errors: NOT_QUEUED (not queued in this core), IN_FLIGHT (dispatched: complete it).
 * O(1). Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_withdraw(creditloop_core* core,
                                                     creditloop_request* request);

/* One decision. `out_class` is the class it went out under (0 is P1; creditloop_classes() is the
 * unmetered class); `turn_class` the class of the turn that visited it. */
typedef struct creditloop_decision {
  creditloop_request* request;
  creditloop_ticket ticket;
  creditloop_participant participant;
  int out_class;
  int turn_class;
} creditloop_decision;

/* Up to `capacity` decisions at `now` into `out`, in order (Core::dispatch): call it with the
 * room the server has. `*count` receives how many; fewer only when every queue is empty.
 * BAD_ARGUMENT for a null core or count, or a null `out` with a capacity. Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_dispatch(creditloop_core* core, int64_t now,
                                                     creditloop_decision* out, size_t capacity,
                                                     size_t* count);
/* The server has no room: the current turn ends (Core::end_turn). Allocates nothing. */
CREDITLOOP_API void creditloop_end_turn(creditloop_core* core);

/* What a completion did. */
typedef struct creditloop_completion {
  creditloop_participant participant;
  int bucket;  /* the admitting class; creditloop_classes() for an unmetered request */
  int charged; /* 0 when the cost went nowhere */
} creditloop_completion;

/* Charges `cost` credits to the request's admitting bucket after its refill to `now`, and gives
 * the request back to the caller. Errors: BAD_COST, UNKNOWN_TICKET, STALE_TICKET. `out` may be
 * null. Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_complete(creditloop_core* core,
                                                     creditloop_ticket ticket, double cost,
                                                     int64_t now, creditloop_completion* out);
/* The same with the cost in nano-credits (0 .. 1e15). */
CREDITLOOP_API creditloop_status creditloop_complete_nano(creditloop_core* core,
                                                          creditloop_ticket ticket,
                                                          int64_t cost_nano, int64_t now,
                                                          creditloop_completion* out);

/* Hands back every queued request (shutdown) in `*handed_back`, as a chain like
 * creditloop_remove's (null when none); ends any turn. Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_take_all_queued(creditloop_core* core,
                                                            creditloop_request** handed_back);

/* ---- readings ----------------------------------------------------------------------------- */

/* One participant at `now` (each balance refilled to `now` first). Balances and costs in
 * nano-credits, clipped to int64; `holds` bit c says the plan holds class c; next_credit[c]
 * is -1 when class c has a credit now, is not held, or never refills. May grow: set `size` to
 * sizeof(creditloop_participant_snapshot) before creditloop_snapshot fills it. */
typedef struct creditloop_participant_snapshot {
  size_t size;
  const char* name; /* the core's: valid until the participant is removed */
  uint32_t plan;    /* index in the configuration, in the order plans were added or parsed */
  uint32_t shares;
  uint32_t scale;
  uint32_t holds;
  uint64_t queued;
  int64_t oldest_queued_at; /* -1 when nothing is queued */
  int64_t balance_nano[CREDITLOOP_MAX_CLASSES];
  int64_t next_credit[CREDITLOOP_MAX_CLASSES];
  uint64_t dispatched[CREDITLOOP_MAX_CLASSES + 1]; /* by class gone out under; [k] unmetered */
  uint64_t completed;
  int64_t cost_charged_nano;
  int64_t cost_uncharged_nano;
} creditloop_participant_snapshot;

/* Errors: UNKNOWN_PARTICIPANT; BAD_ARGUMENT when `out->size` is smaller than the first
 * version's struct. Allocates nothing. */
CREDITLOOP_API creditloop_status creditloop_snapshot(creditloop_core* core,
                                                     creditloop_participant p, int64_t now,
                                                     creditloop_participant_snapshot* out);

/* The participant at ring place `place` (0 .. creditloop_ring_size() - 1): NOT_FOUND for a free
 * place. For walking every participant. The ring size is UINT32_MAX for a null core. Allocate
 * nothing. */
CREDITLOOP_API uint32_t creditloop_ring_size(const creditloop_core* core);
CREDITLOOP_API creditloop_status creditloop_at(const creditloop_core* core, uint32_t place,
                                               creditloop_participant* out);

/* The first instant at or after `now` at which `p`'s class-`cls` bucket has a credit
 * (Core::next_credit). NOT_FOUND when there is none (class not held, or never). Allocates
 * nothing. */
CREDITLOOP_API creditloop_status creditloop_next_credit(creditloop_core* core,
                                                        creditloop_participant p, int cls,
                                                        int64_t now, int64_t* at);

/* Turns begun on class `cls` (the unmetered class included); UINT64_MAX for a null core or a
 * class out of range. Allocates nothing. */
CREDITLOOP_API uint64_t creditloop_turns(const creditloop_core* core, int cls);

/* ---- a room that finds itself (room_controller.hpp) ---------------------------------------- */

/* Learns a room's slots, from `least` to `most`, from the instants requests are dispatched and
 * completed (docs/design.md, "A room that finds itself"). Reads no clock. Not thread-safe. */
typedef struct creditloop_room_controller creditloop_room_controller;

/* Null when memory is short. `least` 0 is taken as 1, a `most` below `least` as `least`.
 * Allocates. */
CREDITLOOP_API creditloop_room_controller* creditloop_room_controller_new(uint32_t least,
                                                                          uint32_t most);
/* Frees it; null is allowed. */
CREDITLOOP_API void creditloop_room_controller_free(creditloop_room_controller* controller);
/* A request went out at `now`, leaving `in_flight` dispatched and not completed. */
CREDITLOOP_API void creditloop_room_controller_dispatched(creditloop_room_controller* controller,
                                                          int64_t now, uint64_t in_flight);
/* A request dispatched at `dispatched_at` completed at `now`. */
CREDITLOOP_API void creditloop_room_controller_completed(creditloop_room_controller* controller,
                                                         int64_t dispatched_at, int64_t now);
/* The room now; 0 for a null controller. */
CREDITLOOP_API uint32_t
creditloop_room_controller_slots(const creditloop_room_controller* controller);
/* The latency without a queue in the backend, in nanoseconds; 0 until measured. */
CREDITLOOP_API int64_t
creditloop_room_controller_latency(const creditloop_room_controller* controller);

#ifdef __cplusplus
}
#endif

#endif /* CREDITLOOP_CREDITLOOP_H */
