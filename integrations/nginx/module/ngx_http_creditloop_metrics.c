/*
 * The metrics: the Prometheus text format, every family summed over the live
 * workers of this configuration from the zone, whichever worker serves the
 * scrape.
 */


#include "ngx_http_creditloop.h"


static u_char *
ngx_http_creditloop_class_label(u_char *p, int c)
{
    return ngx_sprintf(p, "P%d", c + 1);
}


/* One value summed over every worker of this configuration, from the zone. A
 * worker that exited keeps its counts there until a reload, and nginx starts a
 * crashed worker's successor on the same entry; the old workers of a reload
 * write their own configuration's zone. */
static uint64_t
ngx_http_creditloop_sum(ngx_http_creditloop_main_conf_t *mcf, size_t value)
{
    uint64_t   sum = 0;
    ngx_uint_t w;
    for (w = 0; w < mcf->zone_workers; ++w) {
        creditloop_zone_entry *e = ngx_http_creditloop_entry(mcf, w);
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


/* What every report does first: GET or HEAD only, the body discarded, and
 * this worker's costs, balances and passes stored as of now (the other
 * workers' are as of their last epoch). */
static ngx_int_t
ngx_http_creditloop_report_start(
    ngx_http_request_t *r, ngx_http_creditloop_main_conf_t *mcf, int64_t now)
{
    ngx_int_t rc;

    if (r->method != NGX_HTTP_GET && r->method != NGX_HTTP_HEAD) {
        return NGX_HTTP_NOT_ALLOWED;
    }
    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }
    if (mcf->core == NULL) {
        return NGX_HTTP_NOT_FOUND;
    }
    ngx_http_creditloop_store_core(mcf, now);
    return NGX_OK;
}


static ngx_int_t
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


/* Every metric answers for the whole nginx, whichever worker serves the scrape:
 * each worker's counts and gauges are summed from the zone. */
ngx_int_t
ngx_http_creditloop_metrics_handler(ngx_http_request_t *r)
{
    ngx_http_creditloop_main_conf_t *mcf =
        ngx_http_get_module_main_conf(r, ngx_http_creditloop_module);
    ngx_http_creditloop_tenant_t   *t;
    ngx_uint_t                      i;
    int                             c;
    size_t                          size;
    ngx_buf_t                      *b;
    ngx_int_t                       rc;
    int64_t                         now = ngx_http_creditloop_now();
    creditloop_participant_snapshot s;
    uint64_t                        sum;

    rc = ngx_http_creditloop_report_start(r, mcf, now);
    if (rc != NGX_OK) {
        return rc;
    }

    t = mcf->tenants.elts;
    size = 4096 + mcf->tenants.nelts * (size_t) (mcf->classes + 2) * 6 * 160;
    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    b->last = ngx_http_creditloop_help(b->last,
        "creditloop_tenant_requests_total", "counter",
        "Requests answered (their upstream or content handler "
        "done), by the class they went out under.");
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        for (c = 0; c <= mcf->classes; ++c) {
            sum = ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_answered(mcf, i, c));
            b->last = ngx_sprintf(b->last,
                "creditloop_tenant_requests_total{tenant=\"%V\",class=\"",
                &t[i].name);
            b->last = ngx_http_creditloop_class_label(b->last, c);
            b->last = ngx_sprintf(b->last, "\"} %uL\n", sum);
        }
    }
    b->last = ngx_http_creditloop_help(b->last, "creditloop_tenant_queue_depth",
        "gauge", "Requests queued now.");
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        sum = ngx_http_creditloop_sum(
            mcf, ngx_http_creditloop_entry_tenant(
                     mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_QUEUED));
        b->last = ngx_sprintf(b->last,
            "creditloop_tenant_queue_depth{tenant=\"%V\"} %uL\n", &t[i].name,
            sum);
    }
    /* Summed, not labelled by worker: each worker's bucket holds its share of
     * the tenant's plan, so the sum is the tenant's credit in this nginx, what
     * a user compares with the plan's burst and alerts on, as
     * creditloop-server's one bucket; a worker label would change the series
     * with worker_processes, and every query would sum it away. */
    b->last = ngx_http_creditloop_help(b->last,
        "creditloop_tenant_balance_credits", "gauge",
        "Bucket balance per class, summed over the workers' buckets "
        "(each holds its share of the plan); another worker's as of its "
        "last epoch.");
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        /* The classes the tenant's plan holds, the same in every worker. */
        if (creditloop_snapshot(mcf->core, t[i].id, now, &s) != CREDITLOOP_OK) {
            continue;
        }
        for (c = 0; c < mcf->classes; ++c) {
            if (!(s.has_class & (1u << c))) {
                continue;
            }
            sum = ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_tenant(mcf, i,
                         NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO + (size_t) c));
            b->last = ngx_sprintf(b->last,
                "creditloop_tenant_balance_credits{tenant=\"%V\",class=\"",
                &t[i].name);
            b->last = ngx_http_creditloop_class_label(b->last, c);
            /* Signed: a balance may be below 0 after a charge-back; the sum
             * wraps as int64 would. */
            b->last = ngx_sprintf(
                b->last, "\"} %.3f\n", (double) (int64_t) sum / 1e9);
        }
    }
    b->last = ngx_http_creditloop_help(b->last,
        "creditloop_tenant_cost_charged_credits_total", "counter",
        "Cost charged back; another worker's as of its last epoch.");
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        sum = ngx_http_creditloop_sum(
            mcf, ngx_http_creditloop_entry_tenant(
                     mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_COST_NANO));
        b->last = ngx_sprintf(b->last,
            "creditloop_tenant_cost_charged_credits_total{tenant=\"%V\"} "
            "%.3f\n",
            &t[i].name, (double) sum / 1e9);
    }
    b->last = ngx_http_creditloop_help(b->last,
        "creditloop_nginx_refused_total", "counter",
        "Requests answered 503 by the queue limit or the queue timeout.");
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        b->last = ngx_sprintf(b->last,
            "creditloop_nginx_refused_total"
            "{tenant=\"%V\",reason=\"queue_limit\"} %uL\n"
            "creditloop_nginx_refused_total"
            "{tenant=\"%V\",reason=\"queue_timeout\"} %uL\n",
            &t[i].name,
            ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_tenant(
                         mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_LIMIT)),
            &t[i].name,
            ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_tenant(
                         mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_TIMEOUT)));
    }
    b->last = ngx_http_creditloop_help(b->last,
        "creditloop_server_requests_cancelled_total", "counter",
        "Requests whose client went away while they were queued.");
    sum = 0;
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        sum += ngx_http_creditloop_sum(
            mcf, ngx_http_creditloop_entry_tenant(
                     mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_WITHDRAWN));
    }
    b->last = ngx_sprintf(
        b->last, "creditloop_server_requests_cancelled_total %uL\n", sum);
    b->last = ngx_http_creditloop_help(b->last, "creditloop_loop_passes_total",
        "counter",
        "Turns begun, by class; another worker's as of its last "
        "epoch.");
    for (c = 0; c <= mcf->classes; ++c) {
        sum = ngx_http_creditloop_sum(
            mcf, ngx_http_creditloop_entry_worker(
                     mcf, NGX_HTTP_CREDITLOOP_ENTRY_PASSES + (size_t) c));
        b->last = ngx_sprintf(b->last, "creditloop_loop_passes_total{class=\"");
        b->last = ngx_http_creditloop_class_label(b->last, c);
        b->last = ngx_sprintf(b->last, "\"} %uL\n", sum);
    }
    b->last = ngx_http_creditloop_help(b->last, "creditloop_loop_in_flight",
        "gauge", "Requests dispatched and not finished.");
    b->last = ngx_sprintf(b->last, "creditloop_loop_in_flight %uL\n",
        ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_worker(mcf,
                                         NGX_HTTP_CREDITLOOP_ENTRY_IN_FLIGHT)));
    b->last =
        ngx_http_creditloop_help(b->last, "creditloop_loop_room_slots", "gauge",
            "The room: requests in flight at most, all workers "
            "together (creditloop_slots).");
    b->last =
        ngx_sprintf(b->last, "creditloop_loop_room_slots %ui\n", mcf->slots);
    b->last = ngx_http_creditloop_help(b->last,
        "creditloop_server_unauthorized_total", "counter",
        "Requests answered 401: no tenant.");
    b->last = ngx_sprintf(b->last,
        "creditloop_server_unauthorized_total{listener=\"tenants\"} %uL\n",
        ngx_http_creditloop_sum(
            mcf, ngx_http_creditloop_entry_worker(
                     mcf, NGX_HTTP_CREDITLOOP_ENTRY_UNAUTHORIZED)));

    return ngx_http_creditloop_send(r, b, "text/plain; version=0.0.4");
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
    ngx_http_creditloop_main_conf_t *mcf =
        ngx_http_get_module_main_conf(r, ngx_http_creditloop_module);
    ngx_http_creditloop_tenant_t   *t;
    ngx_uint_t                      i;
    int                             c;
    size_t                          size;
    ngx_buf_t                      *b;
    ngx_int_t                       rc;
    int64_t                         now = ngx_http_creditloop_now();
    creditloop_participant_snapshot s;
    uint64_t                        sum, waiting, answered;

    rc = ngx_http_creditloop_report_start(r, mcf, now);
    if (rc != NGX_OK) {
        return rc;
    }
    t = mcf->tenants.elts;
    /* The fixed text, then per tenant its escaped name and plan and, per
     * class, four numbers of at most NGX_INT64_LEN + 16 characters each. */
    size = 512 + (size_t) (mcf->classes + 1) * (NGX_INT64_LEN + 16) * 2;
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        size += 256 + t[i].name.len +
                ngx_escape_json(NULL, t[i].name.data, t[i].name.len) +
                t[i].plan.len +
                ngx_escape_json(NULL, t[i].plan.data, t[i].plan.len) +
                (size_t) (mcf->classes + 1) * (NGX_INT64_LEN + 16) * 4;
    }
    b = ngx_create_temp_buf(r->pool, size);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b->last = ngx_sprintf(b->last,
        "{\"scheduler\":\"nginx\",\"classes\":%d,\"class_names\":[",
        mcf->classes);
    for (c = 0; c <= mcf->classes; ++c) {
        b->last = ngx_sprintf(b->last, "%s\"P%d\"", c ? "," : "", c + 1);
    }
    waiting = 0;
    answered = 0;
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        waiting += ngx_http_creditloop_sum(
            mcf, ngx_http_creditloop_entry_tenant(
                     mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_QUEUED));
        for (c = 0; c <= mcf->classes; ++c) {
            answered += ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_answered(mcf, i, c));
        }
    }
    b->last = ngx_sprintf(b->last,
        "],\"loop\":{\"participants\":%ui,\"waiting\":%uL,"
        "\"in_flight\":%uL,\"dispatched\":%uL,\"passes\":[",
        mcf->tenants.nelts, waiting,
        ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_worker(mcf,
                                         NGX_HTTP_CREDITLOOP_ENTRY_IN_FLIGHT)),
        answered);
    for (c = 0; c <= mcf->classes; ++c) {
        b->last = ngx_sprintf(b->last, "%s%uL", c ? "," : "",
            ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_worker(
                         mcf, NGX_HTTP_CREDITLOOP_ENTRY_PASSES + (size_t) c)));
    }
    b->last = ngx_sprintf(b->last, "]},\"tenants\":[");

    for (i = 0; i < mcf->tenants.nelts; ++i) {
        if (creditloop_snapshot(mcf->core, t[i].id, now, &s) != CREDITLOOP_OK) {
            continue;
        }
        b->last = ngx_sprintf(b->last, "%s{\"name\":\"", i ? "," : "");
        b->last =
            (u_char *) ngx_escape_json(b->last, t[i].name.data, t[i].name.len);
        b->last = ngx_sprintf(b->last, "\",\"plan\":\"");
        b->last =
            (u_char *) ngx_escape_json(b->last, t[i].plan.data, t[i].plan.len);
        b->last = ngx_sprintf(b->last,
            "\",\"shares\":%uD,\"queue_limit\":%ui,\"queued\":%uL,"
            "\"served\":[",
            t[i].shares, t[i].queue_limit,
            ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_tenant(
                         mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_QUEUED)));
        for (c = 0; c <= mcf->classes; ++c) {
            b->last = ngx_sprintf(b->last, "%s%uL", c ? "," : "",
                ngx_http_creditloop_sum(
                    mcf, ngx_http_creditloop_entry_answered(mcf, i, c)));
        }
        sum = ngx_http_creditloop_sum(
            mcf, ngx_http_creditloop_entry_tenant(
                     mcf, i, NGX_HTTP_CREDITLOOP_ENTRY_COST_NANO));
        b->last = ngx_sprintf(b->last, "],\"cost_charged\":%.3f,\"balance\":{",
            (double) sum / 1e9);
        for (c = 0; c < mcf->classes; ++c) {
            if (!(s.has_class & (1u << c))) {
                continue;
            }
            sum = ngx_http_creditloop_sum(
                mcf, ngx_http_creditloop_entry_tenant(mcf, i,
                         NGX_HTTP_CREDITLOOP_ENTRY_BALANCE_NANO + (size_t) c));
            b->last = ngx_sprintf(b->last, "%s\"P%d\":%.3f",
                b->last[-1] == '{' ? "" : ",", c + 1,
                (double) (int64_t) sum / 1e9);
        }
        b->last = ngx_sprintf(b->last, "},\"next_credit_in_s\":{");
        for (c = 0; c < mcf->classes; ++c) {
            if (s.next_credit[c] < 0) {
                continue;
            }
            b->last = ngx_sprintf(b->last, "%s\"P%d\":%.6f",
                b->last[-1] == '{' ? "" : ",", c + 1,
                (double) ngx_max(s.next_credit[c] - now, 0) / 1e9);
        }
        if (s.oldest_queued_at < 0) {
            b->last = ngx_sprintf(b->last, "},\"oldest_queued_age_s\":null}");
        } else {
            b->last = ngx_sprintf(b->last, "},\"oldest_queued_age_s\":%.6f}",
                (double) ngx_max(now - s.oldest_queued_at, 0) / 1e9);
        }
    }
    b->last = ngx_sprintf(b->last, "]}\n");
    return ngx_http_creditloop_send(r, b, "application/json");
}
