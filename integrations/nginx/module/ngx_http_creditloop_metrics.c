/*
 * The metrics: the Prometheus text format, every family summed over the live
 * workers of this configuration from the zone, whichever worker serves the
 * scrape.
 */


#include "ngx_http_creditloop.h"


/* The longest metric line without its tenant's name and room label: the name
 * (45 characters), the labels' fixed text (41) and a 20-digit number. */
#define NGX_HTTP_CREDITLOOP_LINE 128


static u_char *
ngx_http_creditloop_class_label(u_char *p, int c)
{
    return ngx_sprintf(p, "P%d", c + 1);
}


/* One value summed over every worker of this configuration, from the zone. A
 * worker that exited keeps its counts there until a reload, and nginx starts a
 * crashed worker's successor on the same entry; the old workers of a reload
 * write their own configuration's zone. */
uint64_t
ngx_http_creditloop_sum(ngx_http_creditloop_room_t *room, size_t value)
{
    uint64_t   sum = 0;
    ngx_uint_t w;

    for (w = 0; w < room->zone_workers; ++w) {
        creditloop_zone_entry *e = ngx_http_creditloop_entry(room, w);
        /* Any age: an entry is rewritten at epochs only with several workers.
         */
        if (!creditloop_zone_live(e, NGX_HTTP_CREDITLOOP_GENERATION,
                ngx_current_msec, (uint64_t) -1)) {
            continue;
        }
        sum += creditloop_zone_load(e, value);
    }
    return sum;
}


/* What every report does first: GET or HEAD only, the body discarded. */
ngx_int_t
ngx_http_creditloop_report_start(ngx_http_request_t *r)
{
    ngx_http_creditloop_main_conf_t *mcf =
        ngx_http_get_module_main_conf(r, ngx_http_creditloop_module);
    ngx_int_t rc;

    if (r->method != NGX_HTTP_GET && r->method != NGX_HTTP_HEAD) {
        return NGX_HTTP_NOT_ALLOWED;
    }
    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }
    if (mcf->config == NULL || mcf->room->core == NULL) {
        return NGX_HTTP_NOT_FOUND;
    }
    return NGX_OK;
}


ngx_int_t
ngx_http_creditloop_send(
    ngx_http_request_t *r, ngx_buf_t *b, const char *content_type)
{
    ngx_chain_t out;
    ngx_int_t   rc;

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = b->last - b->pos;
    r->headers_out.content_type.data = (u_char *) content_type;
    r->headers_out.content_type.len = ngx_strlen(content_type);
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    rc = ngx_http_send_header(r);
    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;
    out.buf = b;
    out.next = NULL;
    return ngx_http_output_filter(r, &out);
}


static u_char *
ngx_http_creditloop_help(
    u_char *p, const char *name, const char *type, const char *help)
{
    return ngx_sprintf(
        p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}


/* Each family's lines for one room. */

static u_char *
ngx_http_creditloop_requests(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;
    int                           c;

    for (i = 0; i < room->tenants.nelts; ++i) {
        for (c = 0; c <= room->classes; ++c) {
            p = ngx_sprintf(p,
                "creditloop_tenant_requests_total{%Vtenant=\"%V\",class=\"",
                &room->label, &t[i].name);
            p = ngx_http_creditloop_class_label(p, c);
            p = ngx_sprintf(p, "\"} %uL\n",
                ngx_http_creditloop_sum(
                    room, ngx_http_creditloop_entry_answered(room, i, c)));
        }
    }
    return p;
}


static u_char *
ngx_http_creditloop_queue_depth(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;

    for (i = 0; i < room->tenants.nelts; ++i) {
        p = ngx_sprintf(p,
            "creditloop_tenant_queue_depth{%Vtenant=\"%V\"} %uL\n",
            &room->label, &t[i].name,
            ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_tenant(
                          room, i, NGX_HTTP_CREDITLOOP_ENTRY_QUEUED)));
    }
    return p;
}


/* Summed, not labelled by worker: each worker's bucket holds its share of the
 * tenant's plan, so the sum is the tenant's credit in this nginx, what a user
 * compares with the plan's burst and alerts on, as creditloop-server's one
 * bucket; a worker label would change the series with worker_processes, and
 * every query would sum it away. */
static u_char *
ngx_http_creditloop_balances(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t   *t = room->tenants.elts;
    creditloop_participant_snapshot s;
    ngx_uint_t                      i;
    int                             c;
    uint64_t                        sum;

    for (i = 0; i < room->tenants.nelts; ++i) {
        /* The classes the tenant's plan holds, the same in every worker. */
        s.size = sizeof(s);
        if (creditloop_snapshot(room->core, t[i].id, now, &s) !=
            CREDITLOOP_OK) {
            continue;
        }
        for (c = 0; c < room->classes; ++c) {
            if (!(s.holds & (1u << c))) {
                continue;
            }
            sum = ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_tenant(room, i,
                          NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO + (size_t) c));
            p = ngx_sprintf(p,
                "creditloop_tenant_balance_credits{%Vtenant=\"%V\",class=\"",
                &room->label, &t[i].name);
            p = ngx_http_creditloop_class_label(p, c);
            /* Signed: a balance may be below 0 after a charge-back; the sum
             * wraps as int64 would. */
            p = ngx_sprintf(p, "\"} %.3f\n", (double) (int64_t) sum / 1e9);
        }
    }
    return p;
}


static u_char *
ngx_http_creditloop_costs(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;

    for (i = 0; i < room->tenants.nelts; ++i) {
        p = ngx_sprintf(p,
            "creditloop_tenant_cost_charged_credits_total{%Vtenant=\"%V\"} "
            "%.3f\n",
            &room->label, &t[i].name,
            (double) ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_tenant(
                          room, i, NGX_HTTP_CREDITLOOP_ENTRY_COST_NANO)) /
                1e9);
    }
    return p;
}


static u_char *
ngx_http_creditloop_refusals(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    ngx_uint_t                    i;

    for (i = 0; i < room->tenants.nelts; ++i) {
        p = ngx_sprintf(p,
            "creditloop_nginx_refused_total"
            "{%Vtenant=\"%V\",reason=\"queue_limit\"} %uL\n"
            "creditloop_nginx_refused_total"
            "{%Vtenant=\"%V\",reason=\"queue_timeout\"} %uL\n",
            &room->label, &t[i].name,
            ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_tenant(
                          room, i, NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_LIMIT)),
            &room->label, &t[i].name,
            ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_tenant(
                          room, i, NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_TIMEOUT)));
    }
    return p;
}


/* A tenant's wait histogram, summed over the workers: each bucket's own
 * count, and their total. */
uint64_t
ngx_http_creditloop_wait_counts(
    ngx_http_creditloop_room_t *room, size_t t, uint64_t *counts)
{
    uint64_t total = 0;
    size_t   k;

    for (k = 0; k < NGX_HTTP_CREDITLOOP_WAIT_BUCKETS; ++k) {
        counts[k] = ngx_http_creditloop_sum(
            room, ngx_http_creditloop_entry_tenant(
                      room, t, NGX_HTTP_CREDITLOOP_ENTRY_WAIT_BUCKET + k));
        total += counts[k];
    }
    return total;
}


/* The bound of bucket k in seconds; the last has none (+Inf). */
static double
ngx_http_creditloop_wait_bound(size_t k)
{
    return (double) NGX_HTTP_CREDITLOOP_WAIT_FIRST_NS * (double) (1u << k) /
           1e9;
}


/* The q-quantile of a histogram, interpolated within its bucket as
 * creditloop-server's admin interface does, so that creditloop-top reads the
 * same figure from either. */
double
ngx_http_creditloop_wait_quantile(uint64_t *counts, uint64_t total, double q)
{
    double   rank = q * (double) total, lower = 0, upper;
    uint64_t below = 0;
    size_t   k;

    if (total == 0) {
        return 0;
    }
    for (k = 0; k < NGX_HTTP_CREDITLOOP_WAIT_BUCKETS; ++k) {
        if ((double) (below + counts[k]) >= rank && counts[k] != 0) {
            if (k == NGX_HTTP_CREDITLOOP_WAIT_BUCKETS - 1) {
                return lower;
            }
            upper = ngx_http_creditloop_wait_bound(k);
            return lower +
                   (upper - lower) * ngx_min(ngx_max((rank - (double) below) /
                                                         (double) counts[k],
                                                 0.0),
                                         1.0);
        }
        below += counts[k];
        if (k < NGX_HTTP_CREDITLOOP_WAIT_BUCKETS - 1) {
            lower = ngx_http_creditloop_wait_bound(k);
        }
    }
    return lower;
}


static u_char *
ngx_http_creditloop_waits(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    uint64_t                      counts[NGX_HTTP_CREDITLOOP_WAIT_BUCKETS];
    uint64_t                      cumulative;
    ngx_uint_t                    i;
    size_t                        k;

    for (i = 0; i < room->tenants.nelts; ++i) {
        (void) ngx_http_creditloop_wait_counts(room, i, counts);
        cumulative = 0;
        for (k = 0; k < NGX_HTTP_CREDITLOOP_WAIT_BUCKETS; ++k) {
            cumulative += counts[k];
            p = ngx_sprintf(p,
                "creditloop_tenant_queue_wait_seconds_bucket"
                "{%Vtenant=\"%V\",le=\"",
                &room->label, &t[i].name);
            if (k == NGX_HTTP_CREDITLOOP_WAIT_BUCKETS - 1) {
                p = ngx_sprintf(p, "+Inf");
            } else {
                p = ngx_sprintf(p, "%.6f", ngx_http_creditloop_wait_bound(k));
            }
            p = ngx_sprintf(p, "\"} %uL\n", cumulative);
        }
        p = ngx_sprintf(p,
            "creditloop_tenant_queue_wait_seconds_sum{%Vtenant=\"%V\"} %.6f\n"
            "creditloop_tenant_queue_wait_seconds_count{%Vtenant=\"%V\"} "
            "%uL\n",
            &room->label, &t[i].name,
            (double) ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_tenant(
                          room, i, NGX_HTTP_CREDITLOOP_ENTRY_WAIT_SUM_NANO)) /
                1e9,
            &room->label, &t[i].name, cumulative);
    }
    return p;
}


static uint64_t
ngx_http_creditloop_withdrawn(ngx_http_creditloop_room_t *room)
{
    uint64_t   sum = 0;
    ngx_uint_t i;

    for (i = 0; i < room->tenants.nelts; ++i) {
        sum += ngx_http_creditloop_sum(
            room, ngx_http_creditloop_entry_tenant(
                      room, i, NGX_HTTP_CREDITLOOP_ENTRY_WITHDRAWN));
    }
    return sum;
}


static u_char *
ngx_http_creditloop_turns(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    int c;

    for (c = 0; c <= room->classes; ++c) {
        p = ngx_sprintf(
            p, "creditloop_loop_turns_total{%Vclass=\"", &room->label);
        p = ngx_http_creditloop_class_label(p, c);
        p = ngx_sprintf(p, "\"} %uL\n",
            ngx_http_creditloop_sum(
                room, ngx_http_creditloop_entry_worker(
                          room, NGX_HTTP_CREDITLOOP_ENTRY_TURNS + (size_t) c)));
    }
    return p;
}


static u_char *
ngx_http_creditloop_withdrawals(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    return ngx_sprintf(p, "creditloop_server_requests_withdrawn_total%V %uL\n",
        &room->selector, ngx_http_creditloop_withdrawn(room));
}


static u_char *
ngx_http_creditloop_loop_in_flight(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    return ngx_sprintf(p, "creditloop_loop_in_flight%V %uL\n", &room->selector,
        ngx_http_creditloop_sum(
            room, ngx_http_creditloop_entry_worker(
                      room, NGX_HTTP_CREDITLOOP_ENTRY_IN_FLIGHT)));
}


static u_char *
ngx_http_creditloop_room_slots(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    return ngx_sprintf(p, "creditloop_loop_room_slots%V %uL\n", &room->selector,
        room->learned ? ngx_http_creditloop_learned(
                            room, NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_SLOTS)
                      : (uint64_t) room->slots);
}


static u_char *
ngx_http_creditloop_room_latency(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    if (!room->learned) {
        return p;
    }
    return ngx_sprintf(p, "creditloop_loop_room_latency_seconds%V %.6f\n",
        &room->selector,
        (double) ngx_http_creditloop_learned(
            room, NGX_HTTP_CREDITLOOP_ENTRY_LEARNED_LATENCY) /
            1e9);
}


static u_char *
ngx_http_creditloop_unauthorized(
    u_char *p, ngx_http_creditloop_room_t *room, int64_t now)
{
    return ngx_sprintf(p,
        "creditloop_server_unauthorized_total{%Vlistener=\"tenants\"} "
        "%uL\n",
        &room->label,
        ngx_http_creditloop_sum(
            room, ngx_http_creditloop_entry_worker(
                      room, NGX_HTTP_CREDITLOOP_ENTRY_UNAUTHORIZED)));
}


typedef struct {
    const char *name;
    const char *type;
    const char *help;
    u_char *(*lines)(u_char *p, ngx_http_creditloop_room_t *room, int64_t now);
} ngx_http_creditloop_family_t;


/* The families in the order of a scrape, each with its lines for one room. */
static ngx_http_creditloop_family_t ngx_http_creditloop_families[] = {
    {"creditloop_tenant_requests_total", "counter",
        "Requests answered (their upstream or content handler "
        "done), by the class they went out under.",
        ngx_http_creditloop_requests},
    {"creditloop_tenant_queue_depth", "gauge", "Requests queued now.",
        ngx_http_creditloop_queue_depth},
    {"creditloop_tenant_queue_wait_seconds", "histogram",
        "Time from arrival to dispatch.", ngx_http_creditloop_waits},
    {"creditloop_tenant_balance_credits", "gauge",
        "Bucket balance per class, summed over the workers' buckets "
        "(each holds its share of the plan); another worker's as of its "
        "last epoch.",
        ngx_http_creditloop_balances},
    {"creditloop_tenant_cost_charged_credits_total", "counter",
        "Cost charged back; another worker's as of its last epoch.",
        ngx_http_creditloop_costs},
    {"creditloop_nginx_refused_total", "counter",
        "Requests answered 503 by the queue limit or the queue timeout.",
        ngx_http_creditloop_refusals},
    {"creditloop_server_requests_withdrawn_total", "counter",
        "Requests whose client went away while they were queued.",
        ngx_http_creditloop_withdrawals},
    {"creditloop_loop_turns_total", "counter",
        "Turns begun, by class; another worker's as of its last "
        "epoch.",
        ngx_http_creditloop_turns},
    {"creditloop_loop_in_flight", "gauge",
        "Requests dispatched and not finished.",
        ngx_http_creditloop_loop_in_flight},
    {"creditloop_loop_room_slots", "gauge",
        "The room: requests in flight at most, all workers "
        "together (creditloop_slots, creditloop_room); a learned room's, "
        "learned from every worker's requests.",
        ngx_http_creditloop_room_slots},
    {"creditloop_loop_room_latency_seconds", "gauge",
        "A learned room's latency without a queue in the backend "
        "(creditloop_slots auto), from every worker's requests; 0 until "
        "measured.",
        ngx_http_creditloop_room_latency},
    {"creditloop_server_unauthorized_total", "counter",
        "Requests answered 401: no tenant.", ngx_http_creditloop_unauthorized},
    {NULL, NULL, NULL, NULL}};


/* The most one room's lines take: each line's fixed text and numbers fit in
 * NGX_HTTP_CREDITLOOP_LINE characters besides the tenant's name and the room's
 * label; the HELP and TYPE lines are in the handler's first 4 KiB. */
static size_t
ngx_http_creditloop_metrics_size(ngx_http_creditloop_room_t *room)
{
    ngx_http_creditloop_tenant_t *t = room->tenants.elts;
    /* requests and balances by class, queue depth, cost, two refusals, the
     * wait histogram's buckets, sum and count */
    size_t per_tenant = 2 * (size_t) room->classes + 1 + 1 + 1 + 2 +
                        NGX_HTTP_CREDITLOOP_WAIT_BUCKETS + 2;
    size_t size = (size_t) (room->classes + 1 + 4) *
                  (NGX_HTTP_CREDITLOOP_LINE + room->selector.len);
    ngx_uint_t i;

    for (i = 0; i < room->tenants.nelts; ++i) {
        size += per_tenant *
                (NGX_HTTP_CREDITLOOP_LINE + room->label.len + t[i].name.len);
    }
    return size;
}


/* Every metric answers for the whole nginx, whichever worker serves the scrape:
 * each worker's counts and gauges are summed from the zone; this worker's
 * costs, balances and turns are stored as of now first, the other workers'
 * are as of their last epoch. A named room's series carry its name. */
ngx_int_t
ngx_http_creditloop_metrics_handler(ngx_http_request_t *r)
{
    ngx_http_creditloop_main_conf_t *mcf =
        ngx_http_get_module_main_conf(r, ngx_http_creditloop_module);
    ngx_http_creditloop_room_t  **rooms = mcf->rooms.elts;
    ngx_uint_t                    i, n = mcf->rooms.nelts;
    size_t                        size = 4096;
    ngx_buf_t                    *b;
    ngx_int_t                     rc;
    int64_t                       now = ngx_http_creditloop_now();
    u_char                       *p;
    ngx_http_creditloop_family_t *family;

    rc = ngx_http_creditloop_report_start(r);
    if (rc != NGX_OK) {
        return rc;
    }
    for (i = 0; i < n; ++i) {
        ngx_http_creditloop_store_core(rooms[i], now);
        size += ngx_http_creditloop_metrics_size(rooms[i]);
    }
    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    p = b->last;
    for (family = ngx_http_creditloop_families; family->name; family++) {
        p = ngx_http_creditloop_help(
            p, family->name, family->type, family->help);
        for (i = 0; i < n; ++i) {
            p = family->lines(p, rooms[i], now);
        }
    }
    b->last = p;
    return ngx_http_creditloop_send(r, b, "text/plain; version=0.0.4");
}
