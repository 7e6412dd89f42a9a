/*
 * ngx_http_creditloop_module's types and the functions its files share
 * (docs/nginx.md):
 *   ngx_http_creditloop_module.c   directives, configuration, the zone's size
 *   ngx_http_creditloop_config_file.c
 *                                  the configuration file and its tenants
 *   ngx_http_creditloop_worker.c   each worker's core, epoch, shared room and
 *                                  dispatch
 *   ngx_http_creditloop_request.c  a request's life: the phase handler,
 *                                  completion, the filters, the variables
 *   ngx_http_creditloop_metrics.c  the Prometheus text, summed over workers
 *   ngx_http_creditloop_participants.c
 *                                  the participants document, for
 *                                  creditloop-top
 */

#ifndef _NGX_HTTP_CREDITLOOP_H_INCLUDED_
#define _NGX_HTTP_CREDITLOOP_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "creditloop/creditloop.h"
#include "creditloop_share.h"
#include "creditloop_zone.h"


#define NGX_HTTP_CREDITLOOP_BATCH 64
/* The most workers the zone is sized for: past it `nginx -t` refuses. */
#define NGX_HTTP_CREDITLOOP_MAX_WORKERS 1024
/* Each configuration has a zone of its own (noreuse), so every entry in it is
 * of one configuration: the entries' generation is constant. */
#define NGX_HTTP_CREDITLOOP_GENERATION 1
/* An entry not rewritten for this many epochs is a worker gone (a reload's old
 * workers, one that crashed): its demand no longer counts. */
#define NGX_HTTP_CREDITLOOP_TTL_EPOCHS 3
/* The wait histogram's bounds, creditloop-server's: 50 us doubling to 104.86 s,
 * and the bucket above them all. */
#define NGX_HTTP_CREDITLOOP_WAIT_FIRST_NS 50000
#define NGX_HTTP_CREDITLOOP_WAIT_BUCKETS  23


/*
 * One worker's entry in the zone (creditloop_zone.h): written by that worker
 * alone, read by every worker, published under a stamp. Its values, in order,
 * tenants in sorted order:
 *
 *   room                           its total demand, for the room's share
 *   demand[tenants]                queued now plus dispatched in the last
 *                                  epoch, per tenant
 *   answered[tenants][classes + 1] requests answered, by the class they went
 *                                  out under
 *   per tenant                     the NGX_HTTP_CREDITLOOP_ENTRY_* values below
 *   worker-wide                    in flight, unauthorized, owing,
 *                                  turns[classes + 1]
 *
 * The demands and room are rewritten at each epoch; the costs, balances and
 * turns, which only the worker's core knows, at each epoch and at each scrape
 * the worker serves; the others as they change. Values are read without a
 * lock, so a reader may see one epoch's demand of one tenant beside the next
 * epoch's of another, which the rule tolerates as the fleet's store does (each
 * fraction is of one tenant's demands).
 */
#define NGX_HTTP_CREDITLOOP_ENTRY_ROOM 0

/* A tenant's values. */
#define NGX_HTTP_CREDITLOOP_ENTRY_QUEUED          0
#define NGX_HTTP_CREDITLOOP_ENTRY_WITHDRAWN       1
#define NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_LIMIT   2
#define NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_TIMEOUT 3
/* nano-credits */
#define NGX_HTTP_CREDITLOOP_ENTRY_COST_NANO 4
/* the waits from queued to dispatched: their sum in nanoseconds, and
 * [NGX_HTTP_CREDITLOOP_WAIT_BUCKETS] counts, each of the waits up to its
 * bucket's bound and above the one before */
#define NGX_HTTP_CREDITLOOP_ENTRY_WAIT_SUM_NANO 5
#define NGX_HTTP_CREDITLOOP_ENTRY_WAIT_BUCKET   6
/* [classes], nano-credits as int64 */
#define NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO                                 \
    (NGX_HTTP_CREDITLOOP_ENTRY_WAIT_BUCKET + NGX_HTTP_CREDITLOOP_WAIT_BUCKETS)

/* The worker's values. */
#define NGX_HTTP_CREDITLOOP_ENTRY_IN_FLIGHT    0
#define NGX_HTTP_CREDITLOOP_ENTRY_UNAUTHORIZED 1
/* 1 while the worker counts in the shared room's owed */
#define NGX_HTTP_CREDITLOOP_ENTRY_OWING 2
/* 1 while the worker counts in the shared room's urgent */
#define NGX_HTTP_CREDITLOOP_ENTRY_URGENT 3
/* a learned room: this worker's slots, and its no-queue latency in ns */
#define NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_SLOTS   4
#define NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_LATENCY 5
/* [classes + 1] */
#define NGX_HTTP_CREDITLOOP_ENTRY_TURNS 6


/* A request's context's state. */
#define NGX_HTTP_CREDITLOOP_CTX_QUEUED     1
#define NGX_HTTP_CREDITLOOP_CTX_DISPATCHED 2
#define NGX_HTTP_CREDITLOOP_CTX_COMPLETED  3
/* at the queue limit or timeout, or naming no tenant */
#define NGX_HTTP_CREDITLOOP_CTX_REFUSED 4
/* decided and logged, never queued */
#define NGX_HTTP_CREDITLOOP_CTX_DRY_RUN 5


typedef struct {
    ngx_str_t name;
    ngx_str_t plan;
    uint32_t  shares;
    /* 0: none */
    ngx_uint_t queue_limit;
    ngx_msec_t queue_timeout;

    /* its place in the JSON's tenants */
    size_t config_index;

    /* this worker's */
    creditloop_participant id;
    /* queued in this worker's core now */
    ngx_uint_t queued;
    /* dispatched in this worker since the last epoch */
    uint64_t dispatched_epoch;
    /* of its plan this worker enforces, in millionths */
    uint32_t fraction;
} ngx_http_creditloop_tenant_t;


typedef struct ngx_http_creditloop_main_conf_s ngx_http_creditloop_main_conf_t;


/*
 * A room: at most `slots` requests of its locations in flight, all workers
 * together, with its own fair queue (a core in each worker) over every tenant.
 * The default room has no name; `creditloop_room NAME slots=N` adds others,
 * each with a zone of its own.
 */
typedef struct {
    ngx_str_t name;
    /* the slots now: the configured count, or in this worker what its
     * controller has learned, between least and most */
    ngx_uint_t                       slots;
    ngx_uint_t                       least;
    ngx_uint_t                       most;
    unsigned                         learned : 1;
    ngx_http_creditloop_main_conf_t *mcf;
    /* the configuration's tenants, this room's state of them; sorted by name */
    ngx_array_t                   tenants;
    ngx_http_creditloop_tenant_t *default_tenant;
    int                           classes;
    /* `room="NAME",` and `{room="NAME"}` for its metrics; empty for the
     * default room */
    ngx_str_t label;
    ngx_str_t selector;

    /* the zone, the configuration's own */
    ngx_shm_zone_t *zone;
    /* for its worker_processes at the zone's start */
    ngx_cycle_t          *cycle;
    ngx_uint_t            zone_workers;
    u_char               *entries;
    size_t                entry_size;
    creditloop_zone_room *room_words;
    /* a learned room's one controller, all workers' (creditloop_slots auto) */
    creditloop_zone_learned *learned_words;

    /* this worker's */
    ngx_uint_t                  workers;
    creditloop_core            *core;
    creditloop_room_controller *controller;
    /* what this worker's controller learned; slots is the largest any worker
     * learned */
    ngx_uint_t             learned_slots;
    creditloop_zone_entry *own;
    /* its share of the slots: those it fills without borrowing, the fraction
     * of them the last epoch gave it */
    ngx_uint_t share;
    uint32_t   fraction;
    ngx_uint_t in_flight;
    /* with several workers, every slot is taken from it */
    creditloop_zone_room *shared_room;
    /* with several workers and a learned room, every worker feeds it */
    creditloop_zone_learned *shared_learned;
    /* counted in the shared room's owed */
    unsigned owing : 1;
    /* counted in the shared room's urgent */
    unsigned urging : 1;
    /* requests queued here whose tenant had a P1 credit when they came: while
     * any waits, the worker is urgent, and the next slot freed by any worker
     * is this worker's */
    ngx_uint_t urgent;
    /* a retry while the shared room is full */
    ngx_event_t         room_event;
    ngx_event_t         epoch_event;
    ngx_event_t         dispatch_event;
    creditloop_decision decisions[NGX_HTTP_CREDITLOOP_BATCH];
} ngx_http_creditloop_room_t;


struct ngx_http_creditloop_main_conf_s {
    ngx_str_t          config_path;
    creditloop_config *config;
    double             cost_unit_ms;
    /* empty: 401 */
    ngx_str_t  unknown_tenant;
    ngx_uint_t queue_limit;
    ngx_msec_t queue_timeout;
    /* sorted by name; by_config[i] is the JSON's i-th tenant's place here */
    ngx_array_t tenants;
    ngx_uint_t *by_config;
    int         classes;
    ngx_msec_t  epoch;
    /* of ngx_http_creditloop_room_t *; the first is the default room, whose
     * slots creditloop_slots sets */
    ngx_array_t                 rooms;
    ngx_http_creditloop_room_t *room;
    /* with several workers, an eventfd per worker, made before they fork: a
     * worker that gives a slot back while another is owed or urgent wakes it
     * at once, rather than at its next retry */
    ngx_fd_t  *wake_fds;
    ngx_uint_t wake_count;
};


typedef struct {
    /* null: the module is off here */
    ngx_http_complex_value_t *tenant;
    /* the value is a key (creditloop_key), not a name (creditloop_tenant) */
    ngx_flag_t by_key;
    /* the value is $remote_user: a 401 asks for Basic credentials */
    ngx_flag_t                basic;
    ngx_http_complex_value_t *cost;
    /* null: the default room */
    ngx_http_creditloop_room_t *room;
    ngx_flag_t                  off;
    /* the metrics' location: never queued, whatever it inherits */
    ngx_flag_t metrics;
    /* of a refusal at the queue limit or timeout */
    ngx_uint_t status;
    ngx_uint_t log_level;
    ngx_flag_t dry_run;
} ngx_http_creditloop_loc_conf_t;


typedef struct {
    /* first: the record the core links into its queue */
    creditloop_request record;
    /* null once the request has ended while its record is queued */
    ngx_http_request_t           *request;
    ngx_http_creditloop_room_t   *room;
    ngx_http_creditloop_tenant_t *tenant;
    creditloop_ticket             ticket;
    ngx_uint_t                    state;
    int                           out_class;
    int64_t                       queued_at;
    int64_t                       dispatched_at;
    double                        cost;
    /* counted in the worker's urgent */
    unsigned    urgent : 1;
    ngx_event_t timeout;
} ngx_http_creditloop_ctx_t;


/* The entry's layout: the index of one value. */

static ngx_inline size_t
ngx_http_creditloop_entry_demand(ngx_http_creditloop_room_t *room, size_t t)
{
    (void) room;
    return 1 + t;
}


static ngx_inline size_t
ngx_http_creditloop_entry_answered(
    ngx_http_creditloop_room_t *room, size_t t, int c)
{
    return 1 + room->tenants.nelts + t * (size_t) (room->classes + 1) +
           (size_t) c;
}


/* One of a tenant's values; NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO + c for
 * class c's balance. */
static ngx_inline size_t
ngx_http_creditloop_entry_tenant(
    ngx_http_creditloop_room_t *room, size_t t, size_t what)
{
    return 1 + room->tenants.nelts * (size_t) (room->classes + 2) +
           t * (NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO +
                   (size_t) room->classes) +
           what;
}


static ngx_inline size_t
ngx_http_creditloop_entry_worker(ngx_http_creditloop_room_t *room, size_t what)
{
    return ngx_http_creditloop_entry_tenant(room, room->tenants.nelts, 0) +
           what;
}


static ngx_inline size_t
ngx_http_creditloop_entry_size(ngx_http_creditloop_room_t *room)
{
    return creditloop_zone_entry_size(ngx_http_creditloop_entry_worker(
        room, NGX_HTTP_CREDITLOOP_ENTRY_TURNS + (size_t) room->classes + 1));
}


static ngx_inline size_t
ngx_http_creditloop_tenant_index(
    ngx_http_creditloop_room_t *room, ngx_http_creditloop_tenant_t *t)
{
    return (size_t) (t - (ngx_http_creditloop_tenant_t *) room->tenants.elts);
}


/* The wait histogram's bucket of a wait: the first whose bound is at least
 * the wait, as Prometheus's `le` counts. */
static ngx_inline size_t
ngx_http_creditloop_wait_bucket(int64_t wait_ns)
{
    uint64_t above;
    size_t   bucket = 0;

    if (wait_ns <= NGX_HTTP_CREDITLOOP_WAIT_FIRST_NS) {
        return 0;
    }
    above = ((uint64_t) wait_ns - 1) / NGX_HTTP_CREDITLOOP_WAIT_FIRST_NS;
    while (above != 0 && bucket < NGX_HTTP_CREDITLOOP_WAIT_BUCKETS - 1) {
        above >>= 1;
        bucket++;
    }
    return bucket;
}


/* ngx_http_creditloop_module.c */
int64_t ngx_http_creditloop_now(void);

/* ngx_http_creditloop_config_file.c */
char *ngx_http_creditloop_config(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
ngx_http_creditloop_tenant_t *ngx_http_creditloop_find_tenant(
    ngx_array_t *tenants, ngx_str_t *name);

/* ngx_http_creditloop_room.c */
ngx_http_creditloop_room_t *ngx_http_creditloop_new_room(
    ngx_conf_t *cf, ngx_http_creditloop_main_conf_t *mcf);
ngx_int_t ngx_http_creditloop_init_room_conf(
    ngx_conf_t *cf, ngx_http_creditloop_room_t *room);
ngx_int_t ngx_http_creditloop_add_wake_fds(
    ngx_conf_t *cf, ngx_http_creditloop_main_conf_t *mcf, ngx_uint_t workers);
char *ngx_http_creditloop_slots(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_creditloop_room(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_creditloop_room_use(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* ngx_http_creditloop_worker.c */
ngx_int_t  ngx_http_creditloop_init_process(ngx_cycle_t *cycle);
ngx_uint_t ngx_http_creditloop_share(
    ngx_http_creditloop_room_t *room, uint32_t millionths);
void ngx_http_creditloop_waited(ngx_http_creditloop_room_t *room,
    ngx_http_creditloop_tenant_t *t, int64_t wait_ns);
void ngx_http_creditloop_exit_process(ngx_cycle_t *cycle);
creditloop_zone_entry *ngx_http_creditloop_entry(
    ngx_http_creditloop_room_t *room, ngx_uint_t worker);
void ngx_http_creditloop_queued(ngx_http_creditloop_room_t *room,
    ngx_http_creditloop_tenant_t *t, ngx_int_t change);
void ngx_http_creditloop_in_flight(
    ngx_http_creditloop_room_t *room, ngx_int_t change);
void ngx_http_creditloop_count(ngx_http_creditloop_room_t *room,
    ngx_http_creditloop_tenant_t *t, size_t what);
void ngx_http_creditloop_store_core(
    ngx_http_creditloop_room_t *room, int64_t now);

/* ngx_http_creditloop_dispatch.c */
void ngx_http_creditloop_schedule(ngx_http_creditloop_room_t *room);
void ngx_http_creditloop_dispatch(ngx_http_creditloop_room_t *room);
void ngx_http_creditloop_dispatch_handler(ngx_event_t *ev);
void ngx_http_creditloop_owe(ngx_http_creditloop_room_t *room, unsigned owing);
void ngx_http_creditloop_urge(ngx_http_creditloop_room_t *room);
void ngx_http_creditloop_give(ngx_http_creditloop_room_t *room, uint64_t n);
void ngx_http_creditloop_learn(
    ngx_http_creditloop_room_t *room, int64_t dispatched_at, int64_t now);
void     ngx_http_creditloop_relearn(ngx_http_creditloop_room_t *room);
uint64_t ngx_http_creditloop_learned(
    ngx_http_creditloop_room_t *room, size_t value);

/* ngx_http_creditloop_request.c */
void      ngx_http_creditloop_unqueued(ngx_http_creditloop_ctx_t *ctx);
ngx_int_t ngx_http_creditloop_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_creditloop_log_handler(ngx_http_request_t *r);
void      ngx_http_creditloop_resume(ngx_http_creditloop_ctx_t *ctx);
ngx_int_t ngx_http_creditloop_filter_init(ngx_conf_t *cf);
ngx_int_t ngx_http_creditloop_add_variables(ngx_conf_t *cf);

/* ngx_http_creditloop_metrics.c */
ngx_int_t ngx_http_creditloop_metrics_handler(ngx_http_request_t *r);
uint64_t  ngx_http_creditloop_sum(
     ngx_http_creditloop_room_t *room, size_t value);
ngx_int_t ngx_http_creditloop_report_start(ngx_http_request_t *r);
ngx_int_t ngx_http_creditloop_send(
    ngx_http_request_t *r, ngx_buf_t *b, const char *content_type);
uint64_t ngx_http_creditloop_wait_counts(
    ngx_http_creditloop_room_t *room, size_t t, uint64_t *counts);
double ngx_http_creditloop_wait_quantile(
    uint64_t *counts, uint64_t total, double q);

/* ngx_http_creditloop_participants.c */
ngx_int_t ngx_http_creditloop_participants_handler(ngx_http_request_t *r);


extern ngx_module_t ngx_http_creditloop_module;


#endif /* _NGX_HTTP_CREDITLOOP_H_INCLUDED_ */
