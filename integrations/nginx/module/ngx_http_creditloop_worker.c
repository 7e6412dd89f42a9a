/*
 * Each worker's core (through the C API): its share of the plans and of the
 * room, set at each epoch from the workers' demands in the zone; its entry in
 * the zone; the worker's start and exit. The dispatch loop and the room all
 * workers share are ngx_http_creditloop_dispatch.c.
 */


#include "ngx_http_creditloop.h"


static void ngx_http_creditloop_epoch_handler(ngx_event_t *ev);
static void ngx_http_creditloop_unmark(ngx_http_creditloop_room_t *room,
    size_t what, void (*mark)(creditloop_zone_room *room, int change));


creditloop_zone_entry *
ngx_http_creditloop_entry(ngx_http_creditloop_room_t *room, ngx_uint_t worker)
{
    return (
        creditloop_zone_entry *) (room->entries + worker * room->entry_size);
}


/* This worker's gauges in its entry, as they change; read by the metrics of
 * every worker. */
void
ngx_http_creditloop_queued(ngx_http_creditloop_room_t *room,
    ngx_http_creditloop_tenant_t *t, ngx_int_t change)
{
    t->queued += change;
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_tenant(room,
            (size_t) (t - (ngx_http_creditloop_tenant_t *) room->tenants.elts),
            NGX_HTTP_CREDITLOOP_ENTRY_QUEUED),
        t->queued);
}


void
ngx_http_creditloop_in_flight(
    ngx_http_creditloop_room_t *room, ngx_int_t change)
{
    room->in_flight += change;
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_worker(
            room, NGX_HTTP_CREDITLOOP_ENTRY_IN_FLIGHT),
        room->in_flight);
}


/* One more of a tenant's ENTRY_* counters: the entry is the counter's only
 * home, so a worker that nginx starts again in a crashed one's place counts on
 * from where that one stopped. */
void
ngx_http_creditloop_count(ngx_http_creditloop_room_t *room,
    ngx_http_creditloop_tenant_t *t, size_t what)
{
    creditloop_zone_add(room->own,
        ngx_http_creditloop_entry_tenant(room,
            (size_t) (t - (ngx_http_creditloop_tenant_t *) room->tenants.elts),
            what),
        1);
}


/* One more wait in the tenant's histogram. */
void
ngx_http_creditloop_waited(ngx_http_creditloop_room_t *room,
    ngx_http_creditloop_tenant_t *t, int64_t wait_ns)
{
    size_t i = ngx_http_creditloop_tenant_index(room, t);

    creditloop_zone_add(room->own,
        ngx_http_creditloop_entry_tenant(
            room, i, NGX_HTTP_CREDITLOOP_ENTRY_WAIT_SUM_NANO),
        (uint64_t) ngx_max(wait_ns, 0));
    creditloop_zone_add(room->own,
        ngx_http_creditloop_entry_tenant(room, i,
            NGX_HTTP_CREDITLOOP_ENTRY_WAIT_BUCKET +
                ngx_http_creditloop_wait_bucket(wait_ns)),
        1);
}


/* What this worker's core alone knows, into its entry: each tenant's cost
 * charged and balances, and the turns. At each epoch, and for the worker's own
 * at a scrape it serves. */
void
ngx_http_creditloop_store_core(ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t   *t = room->tenants.elts;
    creditloop_participant_snapshot s;
    ngx_uint_t                      i;
    int                             c;

    for (i = 0; i < room->tenants.nelts; ++i) {
        s.size = sizeof(s);
        if (creditloop_snapshot(room->core, t[i].id, now, &s) !=
            CREDITLOOP_OK) {
            continue;
        }
        creditloop_zone_store(room->own,
            ngx_http_creditloop_entry_tenant(
                room, i, NGX_HTTP_CREDITLOOP_ENTRY_COST_NANO),
            (uint64_t) s.cost_charged_nano);
        for (c = 0; c < room->classes; ++c) {
            creditloop_zone_store(room->own,
                ngx_http_creditloop_entry_tenant(room, i,
                    NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO + (size_t) c),
                (uint64_t) s.balance_nano[c]);
        }
    }
    for (c = 0; c <= room->classes; ++c) {
        creditloop_zone_store(room->own,
            ngx_http_creditloop_entry_worker(
                room, NGX_HTTP_CREDITLOOP_ENTRY_TURNS + (size_t) c),
            creditloop_turns(room->core, c));
    }
}


/* This worker's share of the room: the same rule as a tenant's plan, on the
 * workers' total demands, at least one slot so that no worker holds requests it
 * can never start. */
ngx_uint_t
ngx_http_creditloop_share(ngx_http_creditloop_room_t *room, uint32_t millionths)
{
    uint64_t share =
        (uint64_t) room->slots * millionths / CREDITLOOP_WHOLE_PLAN;

    return share == 0 ? 1 : (ngx_uint_t) share;
}


/* Once per epoch (several workers only): publish this worker's demand per
 * tenant (queued now plus dispatched in the epoch), then take, for each tenant,
 * the fraction of its plan the rule gives this worker's demand among the live
 * workers' (a worker whose entry is older than NGX_HTTP_CREDITLOOP_TTL_EPOCHS
 * epochs is gone), and the room likewise. */
static void
ngx_http_creditloop_epoch(ngx_http_creditloop_room_t *room)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_msec_t                    now = ngx_current_msec,
               ttl = room->mcf->epoch * NGX_HTTP_CREDITLOOP_TTL_EPOCHS;
    ngx_uint_t i, w, live = 0, room_changed;
    uint64_t   own_room = 0, all_room = 0;
    int64_t    now_ns = ngx_http_creditloop_now();
    uint32_t   f;

    for (i = 0; i < room->tenants.nelts; ++i) {
        uint64_t d = t[i].queued + t[i].dispatched_epoch;
        t[i].dispatched_epoch = 0;
        own_room += d;
        creditloop_zone_store(
            room->own, ngx_http_creditloop_entry_demand(room, i), d);
    }
    creditloop_zone_store(room->own, NGX_HTTP_CREDITLOOP_ENTRY_ROOM, own_room);
    ngx_http_creditloop_store_core(room, now_ns);
    if (room->controller != NULL) {
        ngx_http_creditloop_relearn(room);
    }
    /* A reader in another worker that sees this stamp sees everything stored
     * before it. */
    creditloop_zone_publish(room->own, NGX_HTTP_CREDITLOOP_GENERATION, now);

    for (i = 0; i < room->tenants.nelts; ++i) {
        uint64_t total = 0;
        uint64_t mine = creditloop_zone_load(
            room->own, ngx_http_creditloop_entry_demand(room, i));
        live = 0;
        for (w = 0; w < room->zone_workers; ++w) {
            creditloop_zone_entry *e = ngx_http_creditloop_entry(room, w);
            if (!creditloop_zone_live(
                    e, NGX_HTTP_CREDITLOOP_GENERATION, now, ttl)) {
                continue;
            }
            live++;
            total += creditloop_zone_load(
                e, ngx_http_creditloop_entry_demand(room, i));
            if (i == 0) {
                all_room +=
                    creditloop_zone_load(e, NGX_HTTP_CREDITLOOP_ENTRY_ROOM);
            }
        }
        f = creditloop_share_fraction(
            mine, total, live == 0 ? 1 : (uint32_t) live);
        if (f != t[i].fraction) {
            if (creditloop_scale(room->core, t[i].id, f, now_ns) ==
                CREDITLOOP_OK) {
                t[i].fraction = f;
            }
        }
    }
    if (room->tenants.nelts == 0) {
        return;
    }
    f = creditloop_share_fraction(
        own_room, all_room, live == 0 ? 1 : (uint32_t) live);
    room->fraction = f;
    room_changed = ngx_http_creditloop_share(room, f) != room->share;
    room->share = ngx_http_creditloop_share(room, f);
    if (room_changed) {
        ngx_http_creditloop_schedule(room);
    }
}


static void
ngx_http_creditloop_epoch_handler(ngx_event_t *ev)
{
    ngx_http_creditloop_room_t *room = ev->data;

    ngx_http_creditloop_epoch(room);
    ngx_add_timer(ev, room->mcf->epoch);
}


/* The worker's core (and a learned room's controller), with room reserved. */
static ngx_int_t
ngx_http_creditloop_new_core(
    ngx_cycle_t *cycle, ngx_http_creditloop_room_t *room)
{
    char              message[512];
    creditloop_status status;

    status = creditloop_core_new(
        room->mcf->config, &room->core, message, sizeof(message));
    if (status != CREDITLOOP_OK) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "creditloop: %s",
            status == CREDITLOOP_BAD_CONFIG ? message
                                            : creditloop_strerror(status));
        return NGX_ERROR;
    }
    /* Room for every slot in flight plus what a worker queues at once: the
     * request path then allocates nothing in the core. */
    if (room->learned) {
        room->controller = creditloop_room_controller_new(
            (uint32_t) room->least, (uint32_t) room->most);
        if (room->controller == NULL) {
            return NGX_ERROR;
        }
        room->slots = creditloop_room_controller_slots(room->controller);
        room->learned_slots = room->slots;
    }
    if (creditloop_reserve(room->core, room->tenants.nelts, room->most) !=
        CREDITLOOP_OK) {
        return NGX_ERROR;
    }
    return NGX_OK;
}


static ngx_int_t
ngx_http_creditloop_add_tenants(
    ngx_cycle_t *cycle, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;
    creditloop_status             status;

    for (i = 0; i < room->tenants.nelts; ++i) {
        status = creditloop_add(room->core, (const char *) t[i].name.data,
            (const char *) t[i].plan.data, t[i].shares, now, &t[i].id);
        if (status != CREDITLOOP_OK) {
            ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                "creditloop: tenant \"%V\": %s", &t[i].name,
                creditloop_strerror(status));
            return NGX_ERROR;
        }
    }
    return NGX_OK;
}


/* The worker's entry in the zone, taken over from a crashed worker's if one
 * held it, and published live. */
static ngx_int_t
ngx_http_creditloop_take_entry(
    ngx_cycle_t *cycle, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;

    if (ngx_worker >= room->zone_workers) {
        /* The zone's start refuses a configuration with more: never
         * reached. */
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
            "creditloop: worker %ui has no zone entry", ngx_worker);
        return NGX_ERROR;
    }
    room->own = ngx_http_creditloop_entry(room, ngx_worker);
    if (room->workers > 1) {
        /* A worker started in a crashed one's place gives back the shared
         * room the crashed one held: its last in-flight count, and its
         * marks as owed and urgent. */
        room->shared_room = room->room_words;
        room->shared_learned = room->learned_words;
        creditloop_room_give(room->shared_room,
            creditloop_zone_load(
                room->own, ngx_http_creditloop_entry_worker(
                               room, NGX_HTTP_CREDITLOOP_ENTRY_IN_FLIGHT)));
        ngx_http_creditloop_unmark(
            room, NGX_HTTP_CREDITLOOP_ENTRY_OWING, creditloop_room_owe);
        ngx_http_creditloop_unmark(
            room, NGX_HTTP_CREDITLOOP_ENTRY_URGENT, creditloop_room_urge);
        room->room_event.handler = ngx_http_creditloop_dispatch_handler;
        room->room_event.data = room;
        room->room_event.log = cycle->log;
        room->room_event.cancelable = 1;
    }
    /* A worker started in a crashed one's place has nothing queued or in
     * flight yet. */
    for (i = 0; i < room->tenants.nelts; ++i) {
        ngx_http_creditloop_queued(room, &t[i], 0);
    }
    ngx_http_creditloop_in_flight(room, 0);
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_worker(
            room, NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_SLOTS),
        room->slots);
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_worker(
            room, NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_LATENCY),
        0);
    ngx_http_creditloop_store_core(room, now);
    /* The entry is live for the metrics from the start, whatever the worker
     * count. */
    creditloop_zone_publish(
        room->own, NGX_HTTP_CREDITLOOP_GENERATION, ngx_current_msec);
    return NGX_OK;
}


/* Each tenant's first fraction of its plan, and with more than one worker the
 * epochs that set it from then on. */
static void
ngx_http_creditloop_start_shares(
    ngx_cycle_t *cycle, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;
    uint32_t                      even;

    if (room->workers <= 1) {
        for (i = 0; i < room->tenants.nelts; ++i) {
            t[i].fraction = CREDITLOOP_WHOLE_PLAN;
        }
        return;
    }
    even = creditloop_share_even((uint32_t) room->workers);
    /* Until the first epoch, each worker enforces 1/n of every plan and of
     * the room, as a fleet's server does at start. */
    for (i = 0; i < room->tenants.nelts; ++i) {
        (void) creditloop_scale(room->core, t[i].id, even, now);
        t[i].fraction = even;
    }
    room->fraction = even;
    room->share = ngx_http_creditloop_share(room, even);
    room->epoch_event.handler = ngx_http_creditloop_epoch_handler;
    room->epoch_event.data = room;
    room->epoch_event.log = cycle->log;
    /* Cancelable: a worker shutting down does not wait for its next epoch. */
    room->epoch_event.cancelable = 1;
    ngx_add_timer(&room->epoch_event, room->mcf->epoch);
}


static ngx_int_t
ngx_http_creditloop_init_room(
    ngx_cycle_t *cycle, ngx_http_creditloop_room_t *room)
{
    ngx_core_conf_t *ccf;
    int64_t          now;

    if (ngx_http_creditloop_new_core(cycle, room) != NGX_OK) {
        return NGX_ERROR;
    }
    now = ngx_http_creditloop_now();
    if (ngx_http_creditloop_add_tenants(cycle, room, now) != NGX_OK) {
        return NGX_ERROR;
    }
    room->dispatch_event.handler = ngx_http_creditloop_dispatch_handler;
    room->dispatch_event.data = room;
    room->dispatch_event.log = cycle->log;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);
    /* Without a master there is one process, whatever worker_processes
     * says. */
    room->workers = ngx_process == NGX_PROCESS_SINGLE
                        ? 1
                        : (ngx_uint_t) ccf->worker_processes;
    room->share = room->slots;
    if (ngx_http_creditloop_take_entry(cycle, room, now) != NGX_OK) {
        return NGX_ERROR;
    }
    ngx_http_creditloop_start_shares(cycle, room, now);
    return NGX_OK;
}


/* A mark a crashed worker left in the shared room (owed, urgent), taken back by
 * the worker nginx starts in its place. */
static void
ngx_http_creditloop_unmark(ngx_http_creditloop_room_t *room, size_t what,
    void (*mark)(creditloop_zone_room *room, int change))
{
    size_t at = ngx_http_creditloop_entry_worker(room, what);

    if (creditloop_zone_load(room->own, at) != 0) {
        mark(room->shared_room, -1);
        creditloop_zone_store(room->own, at, 0);
    }
}


/* Woken by another worker that gave a slot back: every room with a queue here
 * looks for room now. */
static void
ngx_http_creditloop_wake_handler(ngx_event_t *ev)
{
    ngx_connection_t                *c = ev->data;
    ngx_http_creditloop_main_conf_t *mcf = c->data;
    ngx_http_creditloop_room_t     **rooms = mcf->rooms.elts;
    ngx_uint_t                       i;
    uint64_t                         count;
    ssize_t                          n;

    /* Level-triggered: the read resets the counter, or the event fires again.
     * What it read (how many wake-ups, or EAGAIN: another read took them)
     * changes nothing: every room with a queue looks for room now. */
    n = read(c->fd, &count, sizeof(count));
    (void) n;
    for (i = 0; i < mcf->rooms.nelts; ++i) {
        if (rooms[i]->core != NULL && creditloop_waiting(rooms[i]->core) != 0) {
            ngx_http_creditloop_dispatch(rooms[i]);
        }
    }
}


/* This worker's eventfd in its event loop, as nginx adds its channel to the
 * master. */
static ngx_int_t
ngx_http_creditloop_watch_wake_fd(
    ngx_cycle_t *cycle, ngx_http_creditloop_main_conf_t *mcf)
{
    ngx_connection_t *c;

    if (mcf->wake_fds == NULL || ngx_process != NGX_PROCESS_WORKER ||
        ngx_worker >= mcf->wake_count) {
        return NGX_OK;
    }
    c = ngx_get_connection(mcf->wake_fds[ngx_worker], cycle->log);
    if (c == NULL) {
        return NGX_ERROR;
    }
    c->data = mcf;
    c->read->handler = ngx_http_creditloop_wake_handler;
    c->read->log = cycle->log;
    c->read->channel = 1;
    if (ngx_add_event(c->read, NGX_READ_EVENT, 0) != NGX_OK) {
        ngx_free_connection(c);
        return NGX_ERROR;
    }
    return NGX_OK;
}


ngx_int_t
ngx_http_creditloop_init_process(ngx_cycle_t *cycle)
{
    ngx_http_creditloop_main_conf_t *mcf;
    ngx_http_creditloop_room_t     **rooms;
    ngx_uint_t                       i;

    /* The cache manager and loader run this too, as worker 0: they serve no
     * request, and their entry would be worker 0's. */
    if (ngx_process != NGX_PROCESS_WORKER &&
        ngx_process != NGX_PROCESS_SINGLE) {
        return NGX_OK;
    }
    mcf =
        ngx_http_cycle_get_module_main_conf(cycle, ngx_http_creditloop_module);
    if (mcf == NULL || mcf->config == NULL) {
        return NGX_OK;
    }
    rooms = mcf->rooms.elts;
    for (i = 0; i < mcf->rooms.nelts; ++i) {
        if (ngx_http_creditloop_init_room(cycle, rooms[i]) != NGX_OK) {
            return NGX_ERROR;
        }
    }
    return ngx_http_creditloop_watch_wake_fd(cycle, mcf);
}


void
ngx_http_creditloop_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_creditloop_main_conf_t *mcf;
    ngx_http_creditloop_room_t     **rooms;
    ngx_uint_t                       i;

    mcf =
        ngx_http_cycle_get_module_main_conf(cycle, ngx_http_creditloop_module);
    if (mcf == NULL) {
        return;
    }
    rooms = mcf->rooms.elts;
    for (i = 0; i < mcf->rooms.nelts; ++i) {
        if (rooms[i]->core == NULL) {
            continue;
        }
        if (rooms[i]->shared_room != NULL) {
            ngx_http_creditloop_owe(rooms[i], 0);
            rooms[i]->urgent = 0;
            ngx_http_creditloop_urge(rooms[i]);
        }
        creditloop_core_free(rooms[i]->core);
        rooms[i]->core = NULL;
        creditloop_room_controller_free(rooms[i]->controller);
        rooms[i]->controller = NULL;
    }
}
