/*
 * Each worker's dispatch loop, on the worker's event loop: the slots it may
 * take from the room all workers share, the slots it gives back, and the
 * room's controller that completions feed.
 */


#include "ngx_http_creditloop.h"


void
ngx_http_creditloop_schedule(ngx_http_creditloop_room_t *room)
{
    /* Decisions are taken from a posted event, never inside the call that made
     * room: a request finalized deep in another module's code must not resume
     * others from there. */
    ngx_post_event(&room->dispatch_event, &ngx_posted_events);
}


/* How many of `want` slots this worker may fill now: with one worker, what its
 * room has free; with several, slots taken one by one from the room they share:
 * while any worker holds an urgent request, only the workers that do; otherwise
 * up to the worker's share, then borrowed while no worker below its own share
 * waits. */
static size_t
ngx_http_creditloop_take_room(ngx_http_creditloop_room_t *room, size_t want)
{
    size_t took = 0;
    int    urgent;

    if (room->shared_room == NULL) {
        return room->in_flight >= room->share
                   ? 0
                   : ngx_min(want, room->share - room->in_flight);
    }
    /* Urgent takes any slot free while it holds an urgent request, not one per
     * such request: the core sends out its queues in its own order, so an
     * urgent request may wait behind others of its worker, and one slot at a
     * time there kept the whole room nearly empty (a flood whose own requests
     * came with P1 credits went down to a fifth of the backend's rate). */
    urgent = room->urgent != 0;
    while (took < want) {
        if (!creditloop_room_take(room->shared_room, room->slots,
                !urgent && room->in_flight + took >= room->share, urgent)) {
            break;
        }
        took++;
    }
    return took;
}


/* A completion, to the room's controller: the one in the zone that every
 * worker feeds, or with one worker its own. */
void
ngx_http_creditloop_learn(
    ngx_http_creditloop_room_t *room, int64_t dispatched_at, int64_t now)
{
    ngx_uint_t slots;

    if (room->shared_learned != NULL) {
        (void) creditloop_learned_completed(
            room->shared_learned, dispatched_at, now);
        ngx_http_creditloop_relearn(room);
        return;
    }
    creditloop_room_controller_completed(room->controller, dispatched_at, now);
    slots = creditloop_room_controller_slots(room->controller);
    if (slots == room->learned_slots) {
        return;
    }
    room->learned_slots = slots;
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_worker(
            room, NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_SLOTS),
        slots);
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_worker(
            room, NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_LATENCY),
        (uint64_t) creditloop_room_controller_latency(room->controller));
    ngx_http_creditloop_relearn(room);
}


/* One of a learned room's values (slots, latency): the zone's controller's, or
 * with one worker the largest a worker's entry holds (the worker before a
 * reload's may still hold one). */
uint64_t
ngx_http_creditloop_learned(ngx_http_creditloop_room_t *room, size_t value)
{
    creditloop_zone_entry *e;
    uint64_t               most = 0, v;
    ngx_uint_t             w;

    if (room->shared_learned != NULL) {
        return value == NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_SLOTS
                   ? creditloop_learned_slots(room->shared_learned)
                   : creditloop_learned_latency(room->shared_learned);
    }
    for (w = 0; w < room->zone_workers; ++w) {
        e = ngx_http_creditloop_entry(room, w);
        /* Any age, as the metrics' sums: a worker's entry is rewritten at
         * epochs only with several workers. */
        if (!creditloop_zone_live(e, NGX_HTTP_CREDITLOOP_GENERATION,
                ngx_current_msec, (uint64_t) -1)) {
            continue;
        }
        v = creditloop_zone_load(
            e, ngx_http_creditloop_entry_worker(room, value));
        most = ngx_max(most, v);
    }
    return most;
}


/* The room every worker takes its slots against: the zone's controller's, one
 * room for all, as a fixed one is. */
void
ngx_http_creditloop_relearn(ngx_http_creditloop_room_t *room)
{
    uint64_t slots = ngx_http_creditloop_learned(
        room, NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_SLOTS);

    if (room->shared_learned == NULL) {
        slots =
            ngx_max(slots, creditloop_room_controller_slots(room->controller));
    }
    if (slots == room->slots) {
        return;
    }
    room->slots = slots;
    room->share = room->shared_room != NULL
                      ? ngx_http_creditloop_share(room, room->fraction)
                      : slots;
    ngx_http_creditloop_schedule(room);
}


/* The worker's urgent mark in the shared room follows its urgent requests. */
void
ngx_http_creditloop_urge(ngx_http_creditloop_room_t *room)
{
    unsigned urging = room->urgent != 0;

    if (room->shared_room == NULL || room->urging == urging) {
        return;
    }
    room->urging = urging;
    creditloop_room_urge(room->shared_room, urging ? 1 : -1);
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_worker(
            room, NGX_HTTP_CREDITLOOP_ENTRY_URGENT),
        urging);
}


/* Slots back to the room. With several workers, one that is owed or urgent is
 * woken through its eventfd: it takes the slot now, not at its next retry, a
 * millisecond away. */
void
ngx_http_creditloop_give(ngx_http_creditloop_room_t *room, uint64_t n)
{
    ngx_http_creditloop_main_conf_t *mcf = room->mcf;
    creditloop_zone_entry           *e;
    ngx_uint_t                       w;
    uint64_t                         one = 1;

    if (room->shared_room == NULL) {
        return;
    }
    creditloop_room_give(room->shared_room, n);
    if (mcf->wake_fds == NULL || !creditloop_room_awaited(room->shared_room)) {
        return;
    }
    for (w = 0; w < room->zone_workers && w < mcf->wake_count; ++w) {
        if (w == ngx_worker) {
            continue;
        }
        e = ngx_http_creditloop_entry(room, w);
        if (!creditloop_zone_live(e, NGX_HTTP_CREDITLOOP_GENERATION,
                ngx_current_msec, (uint64_t) -1)) {
            continue;
        }
        if (creditloop_zone_load(e, ngx_http_creditloop_entry_worker(room,
                                        NGX_HTTP_CREDITLOOP_ENTRY_OWING)) ||
            creditloop_zone_load(e, ngx_http_creditloop_entry_worker(room,
                                        NGX_HTTP_CREDITLOOP_ENTRY_URGENT))) {
            /* Nonblocking: it fails only when the counter is full, and a
             * counter already set wakes the worker all the same. */
            if (write(mcf->wake_fds[w], &one, sizeof(one)) == -1) {
                continue;
            }
        }
    }
}


void
ngx_http_creditloop_owe(ngx_http_creditloop_room_t *room, unsigned owing)
{
    if (room->owing == owing) {
        return;
    }
    room->owing = owing;
    creditloop_room_owe(room->shared_room, owing ? 1 : -1);
    creditloop_zone_store(room->own,
        ngx_http_creditloop_entry_worker(room, NGX_HTTP_CREDITLOOP_ENTRY_OWING),
        owing);
}


void
ngx_http_creditloop_dispatch(ngx_http_creditloop_room_t *room)
{
    int64_t now = ngx_http_creditloop_now();
    size_t  want, took, got, i;

    if (room->shared_room != NULL) {
        ngx_http_creditloop_owe(room, 0);
    }
    for (;;) {
        want = creditloop_waiting(room->core);
        if (want == 0) {
            return;
        }
        took = ngx_http_creditloop_take_room(
            room, ngx_min(want, NGX_HTTP_CREDITLOOP_BATCH));
        if (took == 0) {
            break;
        }
        if (creditloop_dispatch(room->core, now, room->decisions, took, &got) !=
            CREDITLOOP_OK) {
            got = 0;
        }
        if (got < took) {
            ngx_http_creditloop_give(room, took - got);
        }
        for (i = 0; i < got; ++i) {
            creditloop_decision       *d = &room->decisions[i];
            ngx_http_creditloop_ctx_t *ctx = d->request->user;
            ngx_http_creditloop_unqueued(ctx);
            if (ctx->request == NULL) {
                /* Its request ended while queued and the withdrawal was
                 * refused: retire it at no cost. */
                (void) creditloop_complete(room->core, d->ticket, 0, now, NULL);
                ngx_http_creditloop_give(room, 1);
                ngx_free(ctx);
                continue;
            }
            ctx->state = NGX_HTTP_CREDITLOOP_CTX_DISPATCHED;
            ctx->ticket = d->ticket;
            ctx->out_class = d->out_class;
            ctx->dispatched_at = now;
            ctx->tenant->dispatched_epoch++;
            ngx_http_creditloop_waited(room, ctx->tenant, now - ctx->queued_at);
            ngx_http_creditloop_in_flight(room, 1);
            if (room->shared_learned != NULL) {
                (void) creditloop_learned_dispatched(room->shared_learned, now,
                    creditloop_room_used(room->shared_room));
                ngx_http_creditloop_relearn(room);
            } else if (room->controller != NULL) {
                creditloop_room_controller_dispatched(room->controller, now,
                    room->shared_room != NULL
                        ? creditloop_room_used(room->shared_room)
                        : room->in_flight);
            }
            ngx_http_creditloop_resume(ctx);
        }
        if (got < took) {
            return; /* every queue is empty */
        }
    }
    /* Requests queued and no room. Another worker's completion wakes this one
     * while it is owed or urgent; otherwise, or should the wake-up be missed,
     * it looks again in a millisecond. Owed while below its share. */
    if (room->shared_room != NULL) {
        ngx_http_creditloop_owe(room, room->in_flight < room->share);
        if (!room->room_event.timer_set) {
            ngx_add_timer(&room->room_event, 1);
        }
    }
    creditloop_end_turn(room->core);
}


void
ngx_http_creditloop_dispatch_handler(ngx_event_t *ev)
{
    ngx_http_creditloop_dispatch(ev->data);
}
