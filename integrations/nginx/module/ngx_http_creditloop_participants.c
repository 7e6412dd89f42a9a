/*
 * The participants document: what creditloop-server's /debug/participants
 * answers, as far as the module knows it, for creditloop-top.
 */


#include "ngx_http_creditloop.h"


/* The size of the document below: the fixed text, then per tenant its escaped
 * name and plan and, per class, four numbers of at most NGX_INT64_LEN + 16
 * characters each. */
static size_t
ngx_http_creditloop_participants_size(ngx_http_creditloop_room_t *room)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;
    size_t                        size;

    size = 512 + (size_t) (room->classes + 1) * (NGX_INT64_LEN + 16) * 2;
    for (i = 0; i < room->tenants.nelts; ++i) {
        size += 256 + t[i].name.len +
                ngx_escape_json(NULL, t[i].name.data, t[i].name.len) +
                t[i].plan.len +
                ngx_escape_json(NULL, t[i].plan.data, t[i].plan.len) +
                (size_t) (room->classes + 1) * (NGX_INT64_LEN + 16) * 4 +
                4 * (NGX_INT64_LEN + 16);
    }
    return size;
}


/* The document's opening: the classes and the loop's counts, summed over the
 * workers. */
static u_char *
ngx_http_creditloop_loop_json(u_char *p, ngx_http_creditloop_room_t *room)
{
    ngx_uint_t i;
    int        c;
    uint64_t   waiting, answered;

    p = ngx_sprintf(p,
        "{\"scheduler\":\"nginx\",\"classes\":%d,\"class_names\":[",
        room->classes);
    for (c = 0; c <= room->classes; ++c) {
        p = ngx_sprintf(p, "%s\"P%d\"", c ? "," : "", c + 1);
    }
    waiting = 0;
    answered = 0;
    for (i = 0; i < room->tenants.nelts; ++i) {
        waiting += ngx_http_creditloop_sum(
            room, ngx_http_creditloop_entry_tenant(
                      room, i, NGX_HTTP_CREDITLOOP_ENTRY_QUEUED));
        for (c = 0; c <= room->classes; ++c) {
            answered += ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_answered(room, i, c));
        }
    }
    p = ngx_sprintf(p,
        "],\"loop\":{\"participants\":%ui,\"waiting\":%uL,"
        "\"in_flight\":%uL,\"dispatched\":%uL,\"turns\":[",
        room->tenants.nelts, waiting,
        ngx_http_creditloop_sum(room, ngx_http_creditloop_entry_worker(room,
                                          NGX_HTTP_CREDITLOOP_ENTRY_IN_FLIGHT)),
        answered);
    for (c = 0; c <= room->classes; ++c) {
        p = ngx_sprintf(p, "%s%uL", c ? "," : "",
            ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_worker(
                          room, NGX_HTTP_CREDITLOOP_ENTRY_TURNS + (size_t) c)));
    }
    p = ngx_sprintf(p, "]},\"tenants\":[");
    return p;
}


/* One tenant's entry: its counts from the zone, its next credits and oldest
 * request from this worker's core (snapshot `s`). */
static u_char *
ngx_http_creditloop_tenant_json(u_char *p, ngx_http_creditloop_room_t *room,
    ngx_uint_t i, creditloop_participant_snapshot *s, int64_t now,
    ngx_uint_t first)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    int                           c;
    uint64_t                      sum, total;
    uint64_t                      counts[NGX_HTTP_CREDITLOOP_WAIT_BUCKETS];

    p = ngx_sprintf(p, "%s{\"name\":\"", first ? "" : ",");
    p = (u_char *) ngx_escape_json(p, t[i].name.data, t[i].name.len);
    p = ngx_sprintf(p, "\",\"plan\":\"");
    p = (u_char *) ngx_escape_json(p, t[i].plan.data, t[i].plan.len);
    p = ngx_sprintf(p,
        "\",\"shares\":%uD,\"queue_limit\":%ui,\"queue_timeout_ms\":%M,"
        "\"queued\":%uL,\"served\":[",
        t[i].shares, t[i].queue_limit, t[i].queue_timeout,
        ngx_http_creditloop_sum(room, ngx_http_creditloop_entry_tenant(room, i,
                                          NGX_HTTP_CREDITLOOP_ENTRY_QUEUED)));
    for (c = 0; c <= room->classes; ++c) {
        p = ngx_sprintf(p, "%s%uL", c ? "," : "",
            ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_answered(room, i, c)));
    }
    sum =
        ngx_http_creditloop_sum(room, ngx_http_creditloop_entry_tenant(room, i,
                                          NGX_HTTP_CREDITLOOP_ENTRY_COST_NANO));
    p = ngx_sprintf(
        p, "],\"cost_charged\":%.3f,\"balance\":{", (double) sum / 1e9);
    for (c = 0; c < room->classes; ++c) {
        if (!(s->holds & (1u << c))) {
            continue;
        }
        sum = ngx_http_creditloop_sum(
            room, ngx_http_creditloop_entry_tenant(room, i,
                      NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO + (size_t) c));
        p = ngx_sprintf(p, "%s\"P%d\":%.3f", p[-1] == '{' ? "" : ",", c + 1,
            (double) (int64_t) sum / 1e9);
    }
    p = ngx_sprintf(p, "},\"next_credit_in_s\":{");
    for (c = 0; c < room->classes; ++c) {
        if (s->next_credit[c] < 0) {
            continue;
        }
        p = ngx_sprintf(p, "%s\"P%d\":%.6f", p[-1] == '{' ? "" : ",", c + 1,
            (double) ngx_max(s->next_credit[c] - now, 0) / 1e9);
    }
    total = ngx_http_creditloop_wait_counts(room, i, counts);
    p = ngx_sprintf(p,
        "},\"wait_s\":{\"count\":%uL,\"p50\":%.6f,\"p99\":%.6f,"
        "\"p999\":%.6f}",
        total, ngx_http_creditloop_wait_quantile(counts, total, 0.50),
        ngx_http_creditloop_wait_quantile(counts, total, 0.99),
        ngx_http_creditloop_wait_quantile(counts, total, 0.999));
    if (s->oldest_queued_at < 0) {
        p = ngx_sprintf(p, ",\"oldest_queued_age_s\":null}");
    } else {
        p = ngx_sprintf(p, ",\"oldest_queued_age_s\":%.6f}",
            (double) ngx_max(now - s->oldest_queued_at, 0) / 1e9);
    }
    return p;
}


/*
 * What creditloop-server's /debug/participants answers, as far as the module
 * knows it, for creditloop-top: the counts summed over the workers from the
 * zone, and what only a core knows (the time to an empty bucket's next credit,
 * the oldest queued request's age) from the serving worker's own core.
 */
ngx_int_t
ngx_http_creditloop_participants_handler(ngx_http_request_t *r)
{
    ngx_http_creditloop_loc_conf_t *lcf =
        ngx_http_get_module_loc_conf(r, ngx_http_creditloop_module);
    ngx_http_creditloop_room_t     *room = lcf->room;
    ngx_http_creditloop_tenant_t   *t;
    ngx_uint_t                      i, written;
    ngx_buf_t                      *b;
    ngx_int_t                       rc;
    int64_t                         now = ngx_http_creditloop_now();
    creditloop_participant_snapshot s;

    rc = ngx_http_creditloop_report_start(r);
    if (rc != NGX_OK) {
        return rc;
    }
    if (room->core == NULL) {
        return NGX_HTTP_NOT_FOUND;
    }
    ngx_http_creditloop_store_core(room, now);
    t = room->tenants.elts;
    b = ngx_create_temp_buf(
        r->pool, ngx_http_creditloop_participants_size(room));
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_http_creditloop_loop_json(b->last, room);
    /* Counted, not read from the index: a tenant whose snapshot failed is
     * left out, and the next one written must not open with a comma. */
    written = 0;
    for (i = 0; i < room->tenants.nelts; ++i) {
        s.size = sizeof(s);
        if (creditloop_snapshot(room->core, t[i].id, now, &s) !=
            CREDITLOOP_OK) {
            continue;
        }
        b->last = ngx_http_creditloop_tenant_json(
            b->last, room, i, &s, now, written == 0);
        written++;
    }
    b->last = ngx_sprintf(b->last, "]}\n");
    return ngx_http_creditloop_send(r, b, "application/json");
}
