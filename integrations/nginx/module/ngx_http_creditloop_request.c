/*
 * A request's life: queued in the precontent phase, resumed when dispatched,
 * completed when its work is done (the filters see the content's end), and
 * the variables that tell of it.
 */


#include "ngx_http_creditloop.h"

#include <math.h>
#include <stdlib.h>


static ngx_http_output_header_filter_pt ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt   ngx_http_next_body_filter;


void
ngx_http_creditloop_resume(ngx_http_creditloop_ctx_t *ctx)
{
    ngx_http_request_t *r = ctx->request;

    if (ctx->timeout.timer_set) {
        ngx_del_timer(&ctx->timeout);
    }
    /* Still watching the client: one that leaves (an HTTP/2 RST_STREAM
     * included) before the posted event runs ends the request here, and never
     * reaches the upstream. */
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_core_run_phases;
    /* Through the request's own connection: if it closes before the event runs,
     * nginx drops the posted event with it. */
    ngx_post_event(r->connection->write, &ngx_posted_events);
}


/* The time every upstream tried took, as $upstream_response_time lists them; 0
 * when there was none, or one has not finished (nginx keeps (ngx_msec_t) -1
 * there until it finalizes). */
static int
ngx_http_creditloop_upstream_ms(ngx_http_request_t *r, double *ms)
{
    ngx_http_upstream_state_t *state;
    ngx_uint_t                 i;

    if (r->upstream_states == NULL || r->upstream_states->nelts == 0) {
        return 0;
    }
    state = r->upstream_states->elts;
    *ms = 0;
    for (i = 0; i < r->upstream_states->nelts; ++i) {
        if (state[i].response_time == (ngx_msec_t) -1) {
            return 0;
        }
        *ms += (double) state[i].response_time;
    }
    return 1;
}


/* The request's cost in credits: the cost variable's value when it is a valid
 * one, else the upstream's response time (or, without an upstream, the time
 * since dispatch) over the cost unit. `variables` is 0 in the pool's cleanup,
 * where evaluating a variable would allocate from the pool being destroyed: the
 * log phase has completed every request that got that far. Computed once, at
 * completion. */
static double
ngx_http_creditloop_cost(
    ngx_http_creditloop_ctx_t *ctx, int variables, int64_t now)
{
    ngx_http_request_t             *r = ctx->request;
    ngx_http_creditloop_loc_conf_t *lcf;
    ngx_str_t                       value;
    double                          ms;

    ctx->cost = 0;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_creditloop_module);
    if (variables && lcf->cost != NULL &&
        ngx_http_complex_value(r, lcf->cost, &value) == NGX_OK &&
        value.len > 0 && value.len < 32) {
        char   buf[32];
        char  *end;
        double x;
        ngx_memcpy(buf, value.data, value.len);
        buf[value.len] = '\0';
        x = strtod(buf, &end);
        if (*end == '\0' && isfinite(x) && x >= 0 && x <= 1e6) {
            ctx->cost = x;
            return x;
        }
    }
    if (ngx_http_creditloop_upstream_ms(r, &ms)) {
        ctx->cost = ms / ctx->room->mcf->cost_unit_ms;
    } else {
        ctx->cost = (double) (now - ctx->dispatched_at) / 1e6 /
                    ctx->room->mcf->cost_unit_ms;
    }
    if (ctx->cost > 1e6) {
        ctx->cost = 1e6;
    }
    return ctx->cost;
}


/* The request's work is done: its cost is charged and its room given back now,
 * whether or not the client has read the response. `variables` as for
 * ngx_http_creditloop_cost. */
static void
ngx_http_creditloop_complete(ngx_http_creditloop_ctx_t *ctx, int variables)
{
    ngx_http_creditloop_room_t *room = ctx->room;
    double                      cost;
    int64_t                     now;

    if (ctx->state != NGX_HTTP_CREDITLOOP_CTX_DISPATCHED) {
        return;
    }
    /* One clock read for the cost and the completion. */
    now = ngx_http_creditloop_now();
    cost = ngx_http_creditloop_cost(ctx, variables, now);
    (void) creditloop_complete(room->core, ctx->ticket, cost, now, NULL);
    ctx->state = NGX_HTTP_CREDITLOOP_CTX_COMPLETED;
    if (room->controller != NULL) {
        ngx_http_creditloop_learn(room, ctx->dispatched_at, now);
    }
    creditloop_zone_add(room->own,
        ngx_http_creditloop_entry_answered(room,
            (size_t) (ctx->tenant -
                      (ngx_http_creditloop_tenant_t *) room->tenants.elts),
            ctx->out_class),
        1);
    ngx_http_creditloop_in_flight(room, -1);
    ngx_http_creditloop_give(room, 1);
    /* Most completions under light load find nothing queued: no event to run
     * then. */
    if (creditloop_waiting(room->core) != 0) {
        ngx_http_creditloop_schedule(room);
    }
}


static void
ngx_http_creditloop_cleanup(void *data)
{
    ngx_http_creditloop_ctx_t  *ctx = data;
    ngx_http_creditloop_room_t *room = ctx->room;

    if (ctx->timeout.timer_set) {
        ngx_del_timer(&ctx->timeout);
    }
    if (ctx->state == NGX_HTTP_CREDITLOOP_CTX_QUEUED) {
        creditloop_status s = creditloop_withdraw(room->core, &ctx->record);
        ngx_http_creditloop_count(
            room, ctx->tenant, NGX_HTTP_CREDITLOOP_ENTRY_WITHDRAWN);
        if (s == CREDITLOOP_OK) {
            ngx_http_creditloop_unqueued(ctx);
            ngx_free(ctx);
        } else {
            /* Only a record this core does not hold is refused, which a queued
             * one never is; were it so, the record stays with the dispatch
             * loop, which retires it when its turn comes, rather than leave the
             * core a freed record. */
            ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0,
                "creditloop: withdraw: %s", creditloop_strerror(s));
            ctx->request = NULL;
        }
        return;
    }
    ngx_http_creditloop_complete(ctx, 0);
    ngx_free(ctx);
}


/* The request's context, also after an internal redirect, which clears every
 * module's context: found again through the pool cleanup that holds it, as the
 * realip module finds its own, so that a redirected request keeps its one place
 * in the queue or its one slot. */
static ngx_http_creditloop_ctx_t *
ngx_http_creditloop_get_ctx(ngx_http_request_t *r)
{
    ngx_http_creditloop_ctx_t *ctx =
        ngx_http_get_module_ctx(r, ngx_http_creditloop_module);
    ngx_pool_cleanup_t *cln;

    if (ctx != NULL || !r->internal) {
        return ctx;
    }
    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_creditloop_cleanup) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_creditloop_module);
            return ctx;
        }
    }
    return NULL;
}


static ngx_int_t
ngx_http_creditloop_refuse(
    ngx_http_request_t *r, ngx_uint_t status, ngx_uint_t retry_after)
{
    if (retry_after > 0) {
        ngx_table_elt_t *h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        h->hash = 1;
        ngx_str_set(&h->key, "Retry-After");
        h->value.data = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
        if (h->value.data == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        h->value.len =
            ngx_sprintf(h->value.data, "%ui", retry_after) - h->value.data;
    }
    return (ngx_int_t) status;
}


static void
ngx_http_creditloop_timeout_handler(ngx_event_t *ev)
{
    ngx_http_creditloop_ctx_t      *ctx = ev->data;
    ngx_http_request_t             *r = ctx->request;
    ngx_connection_t               *c = r->connection;
    ngx_http_creditloop_loc_conf_t *lcf;
    ngx_uint_t                      retry;

    if (ctx->state != NGX_HTTP_CREDITLOOP_CTX_QUEUED) {
        return;
    }
    if (creditloop_withdraw(ctx->room->core, &ctx->record) != CREDITLOOP_OK) {
        return; /* not queued here any more: it is on its way */
    }
    ngx_http_creditloop_unqueued(ctx);
    ngx_http_creditloop_count(
        ctx->room, ctx->tenant, NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_TIMEOUT);
    ctx->state = NGX_HTTP_CREDITLOOP_CTX_REFUSED;
    retry = (ctx->tenant->queue_timeout + 999) / 1000;
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_creditloop_module);
    ngx_log_error(lcf->log_level, c->log, 0,
        "creditloop: refused: tenant \"%V\" queued past its timeout of %M ms",
        &ctx->tenant->name, ctx->tenant->queue_timeout);
    ngx_http_finalize_request(
        r, ngx_http_creditloop_refuse(r, lcf->status, retry ? retry : 1));
    ngx_http_run_posted_requests(c);
}


/* The request's context, found again after an internal redirect through its
 * pool cleanup. Off the request's pool: a record the core holds may outlive its
 * request (see cleanup). */
static ngx_http_creditloop_ctx_t *
ngx_http_creditloop_new_ctx(ngx_http_request_t *r,
    ngx_http_creditloop_room_t *room, ngx_http_creditloop_tenant_t *tenant)
{
    ngx_http_creditloop_ctx_t *ctx =
        ngx_calloc(sizeof(*ctx), r->connection->log);
    ngx_pool_cleanup_t *cln;

    if (ctx == NULL) {
        return NULL;
    }
    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        ngx_free(ctx);
        return NULL;
    }
    creditloop_request_init(&ctx->record, ctx);
    ctx->request = r;
    ctx->room = room;
    ctx->tenant = tenant;
    ctx->out_class = -1;
    ctx->state = NGX_HTTP_CREDITLOOP_CTX_REFUSED; /* until it is queued */
    cln->handler = ngx_http_creditloop_cleanup;
    cln->data = ctx;
    ngx_http_set_ctx(r, ctx, ngx_http_creditloop_module);
    return ctx;
}


/* Out of its tenant's queue: dispatched, withdrawn or refused at its
 * timeout. */
void
ngx_http_creditloop_unqueued(ngx_http_creditloop_ctx_t *ctx)
{
    ngx_http_creditloop_queued(ctx->room, ctx->tenant, -1);
    if (ctx->urgent) {
        ctx->urgent = 0;
        ctx->room->urgent--;
        ngx_http_creditloop_urge(ctx->room);
    }
}


/* The tenant a request's value names: by name, or by key (a SHA-256 looked up
 * in the library, as creditloop-server looks it up). */
static ngx_http_creditloop_tenant_t *
ngx_http_creditloop_find(ngx_http_creditloop_loc_conf_t *lcf,
    ngx_http_creditloop_room_t *room, ngx_str_t *value)
{
    size_t index;

    if (!lcf->by_key) {
        return ngx_http_creditloop_find_tenant(&room->tenants, value);
    }
    if (creditloop_config_find_key(room->mcf->config,
            (const char *) value->data, value->len, &index) != CREDITLOOP_OK) {
        return NULL;
    }
    return (ngx_http_creditloop_tenant_t *) room->tenants.elts +
           room->mcf->by_config[index];
}


/* A request the handler has seen before: it waits while queued; it is resumed
 * once dispatched, unless the client left between the dispatch and now; an
 * internal redirect keeps its place. */
static ngx_int_t
ngx_http_creditloop_seen(ngx_http_request_t *r, ngx_http_creditloop_ctx_t *ctx)
{
    if (ctx->state == NGX_HTTP_CREDITLOOP_CTX_QUEUED) {
        return NGX_AGAIN;
    }
    if (ctx->state == NGX_HTTP_CREDITLOOP_CTX_DISPATCHED &&
        r->connection->error) {
        return NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }
    return NGX_DECLINED;
}


/* A request whose tenant value is empty or names no tenant, and the location
 * has no default: refused as unauthorized, or let through in a dry run. */
static ngx_int_t
ngx_http_creditloop_no_tenant(ngx_http_request_t *r,
    ngx_http_creditloop_loc_conf_t *lcf, ngx_http_creditloop_ctx_t *ctx,
    ngx_uint_t empty)
{
    ngx_table_elt_t            *h;
    ngx_http_creditloop_room_t *room;

    room = lcf->room;
    /* Never the value: it may be a credential. */
    ngx_log_error(lcf->log_level, r->connection->log, 0,
        empty         ? "creditloop: %s: the tenant value is empty"
        : lcf->by_key ? "creditloop: %s: the key is no tenant's"
                      : "creditloop: %s: the tenant value names no tenant",
        lcf->dry_run ? "dry run, would refuse" : "refused");
    if (lcf->dry_run) {
        ctx->state = NGX_HTTP_CREDITLOOP_CTX_DRY_RUN;
        return NGX_DECLINED;
    }
    creditloop_zone_add(room->own,
        ngx_http_creditloop_entry_worker(
            room, NGX_HTTP_CREDITLOOP_ENTRY_UNAUTHORIZED),
        1);
    if (lcf->basic) {
        h = ngx_list_push(&r->headers_out.headers);
        if (h == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
        h->hash = 1;
        ngx_str_set(&h->key, "WWW-Authenticate");
        ngx_str_set(&h->value, "Basic realm=\"creditloop\"");
        r->headers_out.www_authenticate = h;
    }
    return NGX_HTTP_UNAUTHORIZED;
}


/* Into its tenant's queue in the core; urgent (the room asked for it at once)
 * when the tenant already holds a P1 credit. */
static ngx_int_t
ngx_http_creditloop_enqueue(
    ngx_http_request_t *r, ngx_http_creditloop_ctx_t *ctx)
{
    ngx_http_creditloop_room_t   *room;
    ngx_http_creditloop_tenant_t *tenant;
    creditloop_status             status;
    int64_t                       at;

    room = ctx->room;
    tenant = ctx->tenant;
    ctx->queued_at = ngx_http_creditloop_now();
    status =
        creditloop_submit(room->core, tenant->id, &ctx->record, ctx->queued_at);
    if (status != CREDITLOOP_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
            "creditloop: submit: %s", creditloop_strerror(status));
        return NGX_ERROR;
    }
    ctx->state = NGX_HTTP_CREDITLOOP_CTX_QUEUED;
    ngx_http_creditloop_queued(room, tenant, 1);
    if (room->shared_room != NULL &&
        creditloop_next_credit(
            room->core, tenant->id, 0, ctx->queued_at, &at) == CREDITLOOP_OK &&
        at <= ctx->queued_at) {
        ctx->urgent = 1;
        room->urgent++;
        ngx_http_creditloop_urge(room);
    }
    return NGX_OK;
}


/* A queued request waits for its dispatch, its tenant's queue timeout, or its
 * client's leaving. */
static ngx_int_t
ngx_http_creditloop_wait(ngx_http_request_t *r, ngx_http_creditloop_ctx_t *ctx)
{
    if (ctx->tenant->queue_timeout != 0) {
        ctx->timeout.handler = ngx_http_creditloop_timeout_handler;
        ctx->timeout.data = ctx;
        ctx->timeout.log = r->connection->log;
        ngx_add_timer(&ctx->timeout, ctx->tenant->queue_timeout);
    }
    /* Waiting: a client that goes away is noticed (ngx_http_test_reading
     * finalizes the request, whose cleanup withdraws it). Its close may have
     * come with the request itself, leaving the read event ready with no edge
     * to come: looked at now, as limit_req does. */
    if (r->connection->read->ready) {
        ngx_post_event(r->connection->read, &ngx_posted_events);
    } else if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    r->read_event_handler = ngx_http_test_reading;
    r->write_event_handler = ngx_http_request_empty_handler;
    return NGX_AGAIN;
}


ngx_int_t
ngx_http_creditloop_handler(ngx_http_request_t *r)
{
    ngx_http_creditloop_loc_conf_t *lcf;
    ngx_http_creditloop_room_t     *room;
    ngx_http_creditloop_ctx_t      *ctx;
    ngx_http_creditloop_tenant_t   *tenant;
    ngx_str_t                       name;

    if (r != r->main) {
        return NGX_DECLINED;
    }
    ctx = ngx_http_creditloop_get_ctx(r);
    if (ctx != NULL) {
        return ngx_http_creditloop_seen(r, ctx);
    }
    /* An error page is nginx's own answer to a request already decided (refused
     * here, or by an access check): it is never queued again. */
    if (r->error_page) {
        return NGX_DECLINED;
    }
    lcf = ngx_http_get_module_loc_conf(r, ngx_http_creditloop_module);
    if (lcf->tenant == NULL) {
        return NGX_DECLINED;
    }
    room = lcf->room;
    if (room->core == NULL) {
        return NGX_DECLINED;
    }

    if (ngx_http_complex_value(r, lcf->tenant, &name) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    tenant = name.len == 0 ? NULL : ngx_http_creditloop_find(lcf, room, &name);
    if (tenant == NULL) {
        tenant = room->default_tenant;
    }
    ctx = ngx_http_creditloop_new_ctx(r, room, tenant);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }
    if (tenant == NULL) {
        return ngx_http_creditloop_no_tenant(r, lcf, ctx, name.len == 0);
    }
    if (tenant->queue_limit != 0 && tenant->queued >= tenant->queue_limit &&
        room->in_flight >= room->share) {
        ngx_log_error(lcf->log_level, r->connection->log, 0,
            "creditloop: %s: tenant \"%V\" has %ui queued, its limit",
            lcf->dry_run ? "dry run, would refuse" : "refused", &tenant->name,
            tenant->queued);
        if (!lcf->dry_run) {
            ngx_http_creditloop_count(
                room, tenant, NGX_HTTP_CREDITLOOP_ENTRY_REFUSED_LIMIT);
            return ngx_http_creditloop_refuse(r, lcf->status, 1);
        }
    }
    if (lcf->dry_run) {
        /* Decided, never delayed: the request goes on as if the module were
         * off. */
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
            "creditloop: dry run, would queue for tenant \"%V\"",
            &tenant->name);
        ctx->state = NGX_HTTP_CREDITLOOP_CTX_DRY_RUN;
        return NGX_DECLINED;
    }

    if (ngx_http_creditloop_enqueue(r, ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_creditloop_dispatch(room);
    if (ctx->state == NGX_HTTP_CREDITLOOP_CTX_DISPATCHED) {
        /* Room at once: go on without waiting for the posted event. */
        if (r->connection->write->posted) {
            ngx_delete_posted_event(r->connection->write);
        }
        r->write_event_handler = ngx_http_core_run_phases;
        return NGX_DECLINED;
    }
    return ngx_http_creditloop_wait(r, ctx);
}


enum {
    NGX_HTTP_CREDITLOOP_VAR_CLASS,
    NGX_HTTP_CREDITLOOP_VAR_WAIT_MS,
    NGX_HTTP_CREDITLOOP_VAR_COST,
    NGX_HTTP_CREDITLOOP_VAR_TENANT,
    NGX_HTTP_CREDITLOOP_VAR_RESULT
};


static ngx_int_t
ngx_http_creditloop_variable(
    ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_creditloop_ctx_t *ctx = ngx_http_creditloop_get_ctx(r->main);
    ngx_uint_t                 went_out;
    u_char                    *p;

    v->not_found = 1;
    if (ctx == NULL) {
        return NGX_OK;
    }
    went_out = ctx->state == NGX_HTTP_CREDITLOOP_CTX_DISPATCHED ||
               ctx->state == NGX_HTTP_CREDITLOOP_CTX_COMPLETED;
    p = ngx_pnalloc(r->pool, 32);
    if (p == NULL) {
        return NGX_ERROR;
    }
    switch (data) {
    case NGX_HTTP_CREDITLOOP_VAR_CLASS:
        if (!went_out) {
            return NGX_OK;
        }
        v->len = ngx_sprintf(p, "P%d", ctx->out_class + 1) - p;
        break;
    case NGX_HTTP_CREDITLOOP_VAR_WAIT_MS:
        if (!went_out) {
            return NGX_OK;
        }
        v->len = ngx_sprintf(p, "%.3f",
                     (double) (ctx->dispatched_at - ctx->queued_at) / 1e6) -
                 p;
        break;
    case NGX_HTTP_CREDITLOOP_VAR_COST: /* known once the work is done, never
                                          before (in a header) */
        if (ctx->state != NGX_HTTP_CREDITLOOP_CTX_COMPLETED) {
            return NGX_OK;
        }
        v->len = ngx_sprintf(p, "%.4f", ctx->cost) - p;
        break;
    case NGX_HTTP_CREDITLOOP_VAR_TENANT: /* a name from the configuration, never
                                            the request's value */
        if (ctx->tenant == NULL) {
            return NGX_OK;
        }
        p = ctx->tenant->name.data;
        v->len = ctx->tenant->name.len;
        break;
    default: /* the result: a request still queued when it is logged is being
              * withdrawn */
        if (went_out) {
            p = (u_char *) "dispatched";
        } else if (ctx->state == NGX_HTTP_CREDITLOOP_CTX_QUEUED) {
            p = (u_char *) "withdrawn";
        } else if (ctx->state == NGX_HTTP_CREDITLOOP_CTX_DRY_RUN) {
            p = (u_char *) "dry-run";
        } else {
            p = (u_char *) "refused";
        }
        v->len = ngx_strlen(p);
        break;
    }
    v->data = p;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    return NGX_OK;
}


static ngx_http_variable_t ngx_http_creditloop_vars[] = {
    {ngx_string("creditloop_class"), NULL, ngx_http_creditloop_variable,
        NGX_HTTP_CREDITLOOP_VAR_CLASS, NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("creditloop_wait_ms"), NULL, ngx_http_creditloop_variable,
        NGX_HTTP_CREDITLOOP_VAR_WAIT_MS, NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("creditloop_cost"), NULL, ngx_http_creditloop_variable,
        NGX_HTTP_CREDITLOOP_VAR_COST, NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("creditloop_tenant"), NULL, ngx_http_creditloop_variable,
        NGX_HTTP_CREDITLOOP_VAR_TENANT, NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("creditloop_result"), NULL, ngx_http_creditloop_variable,
        NGX_HTTP_CREDITLOOP_VAR_RESULT, NGX_HTTP_VAR_NOCACHEABLE, 0},
    ngx_http_null_variable};

ngx_int_t
ngx_http_creditloop_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t *var, *v;

    for (v = ngx_http_creditloop_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }
        var->get_handler = v->get_handler;
        var->data = v->data;
    }
    return NGX_OK;
}


ngx_int_t
ngx_http_creditloop_log_handler(ngx_http_request_t *r)
{
    ngx_http_creditloop_ctx_t *ctx = ngx_http_creditloop_get_ctx(r);
    /* Where no last buffer was seen (a client gone, a connection reset): the
     * variables can still be evaluated here, not in the pool's cleanup. */

    if (r == r->main && ctx != NULL) {
        ngx_http_creditloop_complete(ctx, 1);
    }
    return NGX_OK;
}


/* The response's head is all there is of it (HEAD, or a status without a body):
 * the work is done. */
static ngx_int_t
ngx_http_creditloop_header_filter(ngx_http_request_t *r)
{
    ngx_http_creditloop_ctx_t *ctx;

    if (r == r->main && r->header_only) {
        ctx = ngx_http_creditloop_get_ctx(r);
        if (ctx != NULL) {
            ngx_http_creditloop_complete(ctx, 1);
        }
    }
    return ngx_http_next_header_filter(r);
}


/* The main request's last buffer is the content's end: the upstream sends it
 * when it finalizes (its response read whole, into buffers or a temporary
 * file), a static file or a cache hit with its only buffer. From here on the
 * client's reading holds the connection, not the room. */
static ngx_int_t
ngx_http_creditloop_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_http_creditloop_ctx_t *ctx;
    ngx_chain_t               *cl;

    if (r == r->main) {
        for (cl = in; cl; cl = cl->next) {
            if (!cl->buf->last_buf) {
                continue;
            }
            ctx = ngx_http_creditloop_get_ctx(r);
            if (ctx != NULL) {
                ngx_http_creditloop_complete(ctx, 1);
            }
            break;
        }
    }
    return ngx_http_next_body_filter(r, in);
}


ngx_int_t
ngx_http_creditloop_filter_init(ngx_conf_t *cf)
{
    (void) cf;
    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_creditloop_header_filter;
    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_creditloop_body_filter;
    return NGX_OK;
}
