/*
 * ngx_http_creditloop_module: creditloop's per-tenant queues, classes and
 * charge-back as a phase of nginx's request processing (docs/nginx.md). This
 * file: the module, its directives and its configuration.
 */


#include "ngx_http_creditloop.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>


static ngx_int_t ngx_http_creditloop_init(ngx_conf_t *cf);
static void     *ngx_http_creditloop_create_main_conf(ngx_conf_t *cf);
static char     *ngx_http_creditloop_init_main_conf(ngx_conf_t *cf, void *conf);
static void     *ngx_http_creditloop_create_loc_conf(ngx_conf_t *cf);
static char     *ngx_http_creditloop_merge_loc_conf(
        ngx_conf_t *cf, void *parent, void *child);
static char *ngx_http_creditloop_tenant(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_cost_unit(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_status(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_metrics(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_participants(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_unknown_tenant(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* A directive's bounds, checked as it is read so that `nginx -t` names the
 * directive and its line; a time's in milliseconds. */
typedef struct {
    ngx_conf_post_handler_pt post_handler;
    ngx_uint_t               low;
    ngx_uint_t               high;
} ngx_http_creditloop_bounds_t;

static char *ngx_http_creditloop_check_number(
    ngx_conf_t *cf, void *post, void *data);
static char *ngx_http_creditloop_check_time(
    ngx_conf_t *cf, void *post, void *data);

#define NGX_HTTP_CREDITLOOP_QUEUE_TIMEOUT 60000
static ngx_http_creditloop_bounds_t ngx_http_creditloop_queue_limit_bounds = {
    ngx_http_creditloop_check_number, 0, 1000000};
/* 0 would run the epoch without end, and past a minute a worker gone still
 * counts for minutes. */
static ngx_http_creditloop_bounds_t ngx_http_creditloop_epoch_bounds = {
    ngx_http_creditloop_check_time, 10, 60000};
static ngx_http_creditloop_bounds_t ngx_http_creditloop_queue_timeout_bounds = {
    ngx_http_creditloop_check_time, 0, 86400000};

static ngx_conf_enum_t ngx_http_creditloop_log_levels[] = {
    {ngx_string("info"), NGX_LOG_INFO}, {ngx_string("notice"), NGX_LOG_NOTICE},
    {ngx_string("warn"), NGX_LOG_WARN}, {ngx_string("error"), NGX_LOG_ERR},
    {ngx_null_string, 0}};

static ngx_command_t ngx_http_creditloop_commands[] = {
    {ngx_string("creditloop_config"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        ngx_http_creditloop_config, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_slots"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE123,
        ngx_http_creditloop_slots, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_room"), NGX_HTTP_MAIN_CONF | NGX_CONF_2MORE,
        ngx_http_creditloop_room, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_room_use"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
            NGX_CONF_TAKE1,
        ngx_http_creditloop_room_use, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_cost_unit"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        ngx_http_creditloop_cost_unit, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_unknown_tenant"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_http_creditloop_unknown_tenant,
        NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_queue_limit"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        ngx_conf_set_num_slot, NGX_HTTP_MAIN_CONF_OFFSET,
        offsetof(ngx_http_creditloop_main_conf_t, queue_limit),
        &ngx_http_creditloop_queue_limit_bounds},
    {ngx_string("creditloop_queue_timeout"),
        NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_msec_slot,
        NGX_HTTP_MAIN_CONF_OFFSET,
        offsetof(ngx_http_creditloop_main_conf_t, queue_timeout),
        &ngx_http_creditloop_queue_timeout_bounds},
    {ngx_string("creditloop_epoch"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
        ngx_conf_set_msec_slot, NGX_HTTP_MAIN_CONF_OFFSET,
        offsetof(ngx_http_creditloop_main_conf_t, epoch),
        &ngx_http_creditloop_epoch_bounds},
    {ngx_string("creditloop_tenant"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
            NGX_CONF_TAKE1,
        ngx_http_creditloop_tenant, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_key"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
            NGX_CONF_TAKE1,
        ngx_http_creditloop_tenant, NGX_HTTP_LOC_CONF_OFFSET, 1, NULL},
    {ngx_string("creditloop_cost"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
            NGX_CONF_TAKE1,
        ngx_http_set_complex_value_slot, NGX_HTTP_LOC_CONF_OFFSET,
        offsetof(ngx_http_creditloop_loc_conf_t, cost), NULL},
    {ngx_string("creditloop_metrics"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
        ngx_http_creditloop_metrics, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_participants"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
        ngx_http_creditloop_participants, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_status"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
            NGX_CONF_NOARGS | NGX_CONF_TAKE1,
        ngx_http_creditloop_status, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_dry_run"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
            NGX_CONF_FLAG,
        ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET,
        offsetof(ngx_http_creditloop_loc_conf_t, dry_run), NULL},
    {ngx_string("creditloop_log_level"),
        NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
            NGX_CONF_TAKE1,
        ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET,
        offsetof(ngx_http_creditloop_loc_conf_t, log_level),
        &ngx_http_creditloop_log_levels},
    ngx_null_command};

static ngx_http_module_t ngx_http_creditloop_module_ctx = {
    ngx_http_creditloop_add_variables,    /* preconfiguration */
    ngx_http_creditloop_init,             /* postconfiguration */
    ngx_http_creditloop_create_main_conf, /* create main configuration */
    ngx_http_creditloop_init_main_conf,   /* init main configuration */
    NULL,                                 /* create server configuration */
    NULL,                                 /* merge server configuration */
    ngx_http_creditloop_create_loc_conf,  /* create location configuration */
    ngx_http_creditloop_merge_loc_conf    /* merge location configuration */
};


ngx_module_t ngx_http_creditloop_module = {NGX_MODULE_V1,
    &ngx_http_creditloop_module_ctx, ngx_http_creditloop_commands,
    NGX_HTTP_MODULE, NULL,            /* init master */
    NULL,                             /* init module */
    ngx_http_creditloop_init_process, /* init process */
    NULL,                             /* init thread */
    NULL,                             /* exit thread */
    ngx_http_creditloop_exit_process, /* exit process */
    NULL,                             /* exit master */
    NGX_MODULE_V1_PADDING};


int64_t
ngx_http_creditloop_now(void)
{
    /* CLOCK_MONOTONIC through the vDSO: no system call, and the core wants
     * nanoseconds, which nginx's cached millisecond clock does not give. */
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}


static void *
ngx_http_creditloop_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_creditloop_main_conf_t *mcf = ngx_pcalloc(cf->pool, sizeof(*mcf));

    if (mcf == NULL) {
        return NULL;
    }
    mcf->cost_unit_ms = -1;
    mcf->queue_limit = NGX_CONF_UNSET_UINT;
    mcf->queue_timeout = NGX_CONF_UNSET_MSEC;
    mcf->epoch = NGX_CONF_UNSET_MSEC;
    if (ngx_array_init(&mcf->tenants, cf->pool, 8,
            sizeof(ngx_http_creditloop_tenant_t)) != NGX_OK ||
        ngx_array_init(&mcf->rooms, cf->pool, 2,
            sizeof(ngx_http_creditloop_room_t *)) != NGX_OK) {
        return NULL;
    }
    mcf->room = ngx_http_creditloop_new_room(cf, mcf);
    if (mcf->room == NULL) {
        return NULL;
    }
    mcf->room->slots = NGX_CONF_UNSET_UINT;
    return mcf;
}


static char *
ngx_http_creditloop_out_of_bounds(
    ngx_conf_t *cf, ngx_http_creditloop_bounds_t *b, const char *unit)
{
    u_char *text = ngx_pnalloc(cf->pool, 96);

    if (text == NULL) {
        return NGX_CONF_ERROR;
    }
    *ngx_snprintf(text, 95, "invalid value: from %ui%s to %ui%s", b->low, unit,
        b->high, unit) = 0;
    return (char *) text;
}


static char *
ngx_http_creditloop_check_number(ngx_conf_t *cf, void *post, void *data)
{
    ngx_http_creditloop_bounds_t *b = post;
    ngx_uint_t                    n = *(ngx_uint_t *) data;

    return n >= b->low && n <= b->high
               ? NGX_CONF_OK
               : ngx_http_creditloop_out_of_bounds(cf, b, "");
}


static char *
ngx_http_creditloop_check_time(ngx_conf_t *cf, void *post, void *data)
{
    ngx_http_creditloop_bounds_t *b = post;
    ngx_msec_t                    t = *(ngx_msec_t *) data;

    return t >= b->low && t <= b->high
               ? NGX_CONF_OK
               : ngx_http_creditloop_out_of_bounds(cf, b, "ms");
}


/* Checked here when creditloop_config came first, as it usually does, so that
 * `nginx -t` names this line; otherwise at the end of the http block. */
static char *
ngx_http_creditloop_unknown_tenant(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_main_conf_t *mcf = conf;
    ngx_str_t                       *value = cf->args->elts;

    (void) cmd;
    if (mcf->unknown_tenant.data != NULL) {
        return "is duplicate";
    }
    mcf->unknown_tenant = value[1];
    if (value[1].len == 0) {
        return "invalid value: a tenant's name";
    }
    if (mcf->config != NULL &&
        ngx_http_creditloop_find_tenant(&mcf->tenants, &value[1]) == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
            "\"creditloop_unknown_tenant\": \"%V\" is not a tenant of \"%V\"",
            &value[1], &mcf->config_path);
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}


static char *
ngx_http_creditloop_cost_unit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    /* A duration, in nginx's own notation with fractions allowed ("1ms",
     * "0.5ms", "2s"); a bare number is seconds, as ngx_parse_time has it. */
    ngx_http_creditloop_main_conf_t *mcf = conf;
    ngx_str_t                       *value = cf->args->elts;
    char                             buf[64];
    char                            *end;
    double                           x, scale = 1;
    size_t                           len = value[1].len;

    (void) cmd;
    if (mcf->cost_unit_ms > 0) {
        return "is duplicate";
    }
    if (len == 0 || len >= sizeof(buf)) {
        return "invalid value";
    }
    ngx_memcpy(buf, value[1].data, len);
    buf[len] = '\0';
    x = strtod(buf, &end);
    if (ngx_strcmp(end, "ms") == 0) {
        scale = 1;
    } else if (ngx_strcmp(end, "s") == 0 || *end == '\0') {
        scale = 1000;
    } else if (ngx_strcmp(end, "us") == 0) {
        scale = 0.001;
    } else {
        return "invalid value: a duration such as 1ms, 0.5ms or 2s";
    }
    x *= scale;
    if (!isfinite(x) || x <= 0 || x > 3.6e6) {
        return "invalid value: a duration above 0";
    }
    mcf->cost_unit_ms = x;
    return NGX_CONF_OK;
}


static char *
ngx_http_creditloop_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_creditloop_main_conf_t *mcf = conf;
    ngx_http_creditloop_tenant_t    *t;
    ngx_http_creditloop_room_t     **rooms;
    ngx_uint_t                       i;

    if (mcf->room->slots == NGX_CONF_UNSET_UINT) {
        mcf->room->slots = 64;
        mcf->room->most = 64;
    }
    ngx_conf_init_uint_value(mcf->queue_limit, 0);
    /* A queued request always has a timer, as every wait in nginx does: a
     * client gone without a word is not queued until its turn. nginx's own
     * timeouts (proxy_read_timeout, send_timeout) are 60s too. */
    ngx_conf_init_msec_value(
        mcf->queue_timeout, NGX_HTTP_CREDITLOOP_QUEUE_TIMEOUT);
    ngx_conf_init_msec_value(mcf->epoch, 250);
    if (mcf->cost_unit_ms <= 0) {
        mcf->cost_unit_ms = 1;
    }
    if (mcf->config == NULL) {
        return NGX_CONF_OK;
    }
    if (mcf->unknown_tenant.len != 0 &&
        ngx_http_creditloop_find_tenant(&mcf->tenants, &mcf->unknown_tenant) ==
            NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
            "\"creditloop_unknown_tenant\": \"%V\" is not a tenant of \"%V\"",
            &mcf->unknown_tenant, &mcf->config_path);
        return NGX_CONF_ERROR;
    }
    t = mcf->tenants.elts;
    for (i = 0; i < mcf->tenants.nelts; ++i) {
        if (t[i].queue_limit == 0) {
            t[i].queue_limit = mcf->queue_limit;
        }
        if (t[i].queue_timeout == 0) {
            t[i].queue_timeout = mcf->queue_timeout;
        }
    }
    rooms = mcf->rooms.elts;
    for (i = 0; i < mcf->rooms.nelts; ++i) {
        if (ngx_http_creditloop_init_room_conf(cf, rooms[i]) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }
    if (ngx_http_creditloop_add_wake_fds(cf, mcf, rooms[0]->zone_workers) !=
        NGX_OK) {
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}


static void *
ngx_http_creditloop_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_creditloop_loc_conf_t *lcf = ngx_pcalloc(cf->pool, sizeof(*lcf));

    if (lcf == NULL) {
        return NULL;
    }
    lcf->off = NGX_CONF_UNSET;
    lcf->status = NGX_CONF_UNSET_UINT;
    lcf->log_level = NGX_CONF_UNSET_UINT;
    lcf->dry_run = NGX_CONF_UNSET;
    return lcf;
}


static char *
ngx_http_creditloop_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_creditloop_loc_conf_t  *prev = parent, *conf = child;
    ngx_http_creditloop_main_conf_t *mcf;

    ngx_conf_merge_value(conf->off, prev->off, 0);
    ngx_conf_merge_uint_value(
        conf->status, prev->status, NGX_HTTP_SERVICE_UNAVAILABLE);
    ngx_conf_merge_uint_value(conf->log_level, prev->log_level, NGX_LOG_ERR);
    ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
    if (conf->tenant == NULL && !conf->off && !conf->metrics) {
        conf->tenant = prev->tenant;
        conf->by_key = prev->by_key;
        conf->basic = prev->basic;
    }
    if (conf->cost == NULL) {
        conf->cost = prev->cost;
    }
    if (conf->room == NULL) {
        conf->room = prev->room;
    }
    if (conf->room == NULL) {
        mcf =
            ngx_http_conf_get_module_main_conf(cf, ngx_http_creditloop_module);
        conf->room = mcf->room;
    }
    if (conf->cost == NULL) {
        ngx_http_compile_complex_value_t ccv;
        ngx_str_t source = ngx_string("$upstream_http_x_cost");
        conf->cost = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
        if (conf->cost == NULL) {
            return NGX_CONF_ERROR;
        }
        ngx_memzero(&ccv, sizeof(ccv));
        ccv.cf = cf;
        ccv.value = &source;
        ccv.complex_value = conf->cost;
        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }
    return NGX_CONF_OK;
}


static char *
ngx_http_creditloop_tenant(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_loc_conf_t  *lcf = conf;
    ngx_str_t                       *value = cf->args->elts;
    ngx_http_compile_complex_value_t ccv;
    ngx_http_creditloop_main_conf_t *mcf;

    if (lcf->tenant != NULL || lcf->off != NGX_CONF_UNSET) {
        return "is duplicate (creditloop_tenant and creditloop_key each name "
               "the tenant)";
    }
    if (ngx_strcmp(value[1].data, "off") == 0) {
        lcf->off = 1;
        return NGX_CONF_OK;
    }
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_creditloop_module);
    if (mcf->config == NULL) {
        return "needs \"creditloop_config\" before it, in the http block";
    }
    lcf->off = 0;
    /* creditloop_key: the value is a key of the JSON's tenants, looked up by
     * its SHA-256 as creditloop-server does; creditloop_tenant: a name. */
    lcf->by_key = cmd->offset == 1;
    /* A 401 names the scheme the client failed: a tenant that is the user
     * auth_basic established. */
    lcf->basic = value[1].len == sizeof("$remote_user") - 1 &&
                 ngx_strncmp(value[1].data, "$remote_user", value[1].len) == 0;
    lcf->tenant = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (lcf->tenant == NULL) {
        return NGX_CONF_ERROR;
    }
    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = &value[1];
    ccv.complex_value = lcf->tenant;
    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}


/* A report's location: its content handler, and never queued, whatever
 * tenant it inherits. */
static char *
ngx_http_creditloop_report(ngx_conf_t *cf, ngx_http_creditloop_loc_conf_t *lcf,
    ngx_http_handler_pt handler)
{
    ngx_http_core_loc_conf_t *clcf =
        ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (lcf->metrics) {
        return "is duplicate";
    }
    lcf->metrics = 1;
    clcf->handler = handler;
    return NGX_CONF_OK;
}


static char *
ngx_http_creditloop_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    (void) cmd;
    return ngx_http_creditloop_report(
        cf, conf, ngx_http_creditloop_metrics_handler);
}


/* creditloop-server's /debug/participants, for creditloop-top. */
static char *
ngx_http_creditloop_participants(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    (void) cmd;
    return ngx_http_creditloop_report(
        cf, conf, ngx_http_creditloop_participants_handler);
}


/* `creditloop_status CODE;` is the refusals' status, as limit_req_status;
 * without a value it is the metrics' handler it named before
 * creditloop_metrics. */
static char *
ngx_http_creditloop_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_loc_conf_t *lcf = conf;
    ngx_str_t                      *value = cf->args->elts;
    ngx_int_t                       code;

    if (cf->args->nelts == 1) {
        if (cf->cmd_type != NGX_HTTP_LOC_CONF) {
            return "without a value is allowed in a location only";
        }
        ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
            "\"creditloop_status\" without a value is deprecated, use "
            "\"creditloop_metrics\"");
        return ngx_http_creditloop_metrics(cf, cmd, conf);
    }
    if (lcf->status != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }
    code = ngx_atoi(value[1].data, value[1].len);
    if (code < 400 || code > 599) {
        return "invalid value: a status code from 400 to 599";
    }
    lcf->status = (ngx_uint_t) code;
    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_creditloop_init(ngx_conf_t *cf)
{
    ngx_http_core_main_conf_t *cmcf =
        ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
    /* After the access phase: a request refused by auth_basic or auth_request
     * never takes a tenant's place, and a tenant that auth_request_set names is
     * known. */
    ngx_http_handler_pt *h =
        ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);

    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_creditloop_handler;
    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }
    *h = ngx_http_creditloop_log_handler;
    return ngx_http_creditloop_filter_init(cf);
}
