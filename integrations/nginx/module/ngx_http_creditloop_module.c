/*
 * ngx_http_creditloop_module: creditloop's per-tenant queues, classes and
 * charge-back as a phase of nginx's request processing (docs/nginx.md). This
 * file: the module, its directives and its configuration.
 */


#include "ngx_http_creditloop.h"

#include <math.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>


static ngx_int_t ngx_http_creditloop_init(ngx_conf_t *cf);
static void     *ngx_http_creditloop_create_main_conf(ngx_conf_t *cf);
static char     *ngx_http_creditloop_init_main_conf(ngx_conf_t *cf, void *conf);
static void     *ngx_http_creditloop_create_loc_conf(ngx_conf_t *cf);
static char     *ngx_http_creditloop_merge_loc_conf(
        ngx_conf_t *cf, void *parent, void *child);
static char *ngx_http_creditloop_config(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
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
static char *ngx_http_creditloop_slots(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_room(
    ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_room_use(
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

#define NGX_HTTP_CREDITLOOP_MAX_SLOTS     1000000
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


static ngx_http_creditloop_room_t *
ngx_http_creditloop_new_room(
    ngx_conf_t *cf, ngx_http_creditloop_main_conf_t *mcf)
{
    ngx_http_creditloop_room_t **slot;
    ngx_http_creditloop_room_t  *room;

    room = ngx_pcalloc(cf->pool, sizeof(*room));
    slot = ngx_array_push(&mcf->rooms);
    if (room == NULL || slot == NULL) {
        return NULL;
    }
    room->mcf = mcf;
    *slot = room;
    return room;
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


static void
ngx_http_creditloop_free_config(void *data)
{
    creditloop_config_free(data);
}


static ngx_int_t
ngx_http_creditloop_tenant_cmp(const void *a, const void *b)
{
    const ngx_http_creditloop_tenant_t *x = a, *y = b;

    return ngx_memn2cmp(x->name.data, y->name.data, x->name.len, y->name.len);
}


ngx_http_creditloop_tenant_t *
ngx_http_creditloop_find_tenant(ngx_array_t *tenants, ngx_str_t *name)
{
    /* Sorted at configuration: O(log tenants) per request. */
    ngx_http_creditloop_tenant_t *t = tenants->elts;
    ngx_int_t                     lo = 0, hi = (ngx_int_t) tenants->nelts - 1;

    while (lo <= hi) {
        ngx_int_t mid = (lo + hi) / 2;
        ngx_int_t c = ngx_memn2cmp(
            name->data, t[mid].name.data, name->len, t[mid].name.len);
        if (c == 0) {
            return &t[mid];
        }
        if (c < 0) {
            hi = mid - 1;
        } else {
            lo = mid + 1;
        }
    }
    return NULL;
}


static char *
ngx_http_creditloop_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_main_conf_t *mcf = conf;
    ngx_str_t                       *value = cf->args->elts;
    ngx_file_t                       file;
    ngx_file_info_t                  fi;
    char                             message[512];
    creditloop_status                status;
    ngx_pool_cleanup_t              *cln;
    size_t                           i, count;

    (void) cmd;
    if (mcf->config != NULL) {
        return "is duplicate";
    }
    mcf->config_path = value[1];
    if (ngx_conf_full_name(cf->cycle, &mcf->config_path, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    ngx_memzero(&file, sizeof(file));
    file.name = mcf->config_path;
    file.log = cf->log;
    file.fd =
        ngx_open_file(mcf->config_path.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (file.fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
            "creditloop_config: cannot open \"%V\"", &mcf->config_path);
        return NGX_CONF_ERROR;
    }
    /* Checked here too, for nginx's own words on a path that is no file. */
    if (ngx_fd_info(file.fd, &fi) == NGX_FILE_ERROR || !ngx_is_file(&fi) ||
        ngx_file_size(&fi) > 16 * 1024 * 1024) {
        ngx_close_file(file.fd);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
            "creditloop_config: \"%V\" is not a regular file of at most 16 MiB",
            &mcf->config_path);
        return NGX_CONF_ERROR;
    }
    ngx_close_file(file.fd);

    /* Read by the library, as creditloop-server reads it: key_file beside the
     * JSON, key_env from the environment now. */
    status = creditloop_config_load((const char *) mcf->config_path.data,
        &mcf->config, message, sizeof(message));
    if (status != CREDITLOOP_OK) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "creditloop_config \"%V\": %s",
            &mcf->config_path,
            status == CREDITLOOP_BAD_CONFIG ? message
                                            : creditloop_strerror(status));
        return NGX_CONF_ERROR;
    }
    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }
    cln->handler = ngx_http_creditloop_free_config;
    cln->data = mcf->config;

    mcf->classes = creditloop_config_classes(mcf->config);
    count = creditloop_config_tenants(mcf->config);
    for (i = 0; i < count; ++i) {
        creditloop_tenant_config      tc;
        ngx_http_creditloop_tenant_t *t;

        tc.size = sizeof(tc);
        if (creditloop_config_tenant(mcf->config, i, &tc) != CREDITLOOP_OK) {
            return NGX_CONF_ERROR;
        }
        t = ngx_array_push(&mcf->tenants);
        if (t == NULL) {
            return NGX_CONF_ERROR;
        }
        ngx_memzero(t, sizeof(*t));
        t->name.len = ngx_strlen(tc.name);
        t->name.data = ngx_pstrdup(
            cf->pool, &(ngx_str_t){t->name.len, (u_char *) tc.name});
        t->plan.len = ngx_strlen(tc.plan);
        t->plan.data = ngx_pnalloc(cf->pool, t->plan.len + 1);
        if (t->name.data == NULL || t->plan.data == NULL) {
            return NGX_CONF_ERROR;
        }
        ngx_cpystrn(t->plan.data, (u_char *) tc.plan, t->plan.len + 1);
        t->shares = tc.shares;
        t->queue_limit = tc.queue_limit;
        t->queue_timeout = (ngx_msec_t) tc.queue_timeout_ms;
        t->config_index = i;
    }
    if (mcf->tenants.nelts == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
            "creditloop_config \"%V\": tenants: none named", &mcf->config_path);
        return NGX_CONF_ERROR;
    }
    ngx_sort(mcf->tenants.elts, mcf->tenants.nelts,
        sizeof(ngx_http_creditloop_tenant_t), ngx_http_creditloop_tenant_cmp);
    /* creditloop_config_find_key answers in the file's order. */
    mcf->by_config = ngx_palloc(cf->pool, count * sizeof(ngx_uint_t));
    if (mcf->by_config == NULL) {
        return NGX_CONF_ERROR;
    }
    for (i = 0; i < count; ++i) {
        mcf->by_config[((ngx_http_creditloop_tenant_t *) mcf->tenants.elts)[i]
                           .config_index] = i;
    }
    return NGX_CONF_OK;
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


/* Here in the master, before any worker of this configuration forks: the zone
 * is new for each configuration (noreuse), so the old workers of a reload, or
 * of a reload that failed, never share a word with the new ones. */
static ngx_int_t
ngx_http_creditloop_init_zone(ngx_shm_zone_t *zone, void *data)
{
    ngx_http_creditloop_room_t *room = zone->data;
    ngx_slab_pool_t            *pool = (ngx_slab_pool_t *) zone->shm.addr;
    ngx_core_conf_t            *ccf = (ngx_core_conf_t *) ngx_get_conf(
                   room->cycle->conf_ctx, ngx_core_module);
    size_t bytes = room->entry_size * room->zone_workers;

    (void) data;
    /* Known only now when worker_processes follows the http block. */
    if (ccf->worker_processes > 0 &&
        (ngx_uint_t) ccf->worker_processes > room->zone_workers) {
        ngx_log_error(NGX_LOG_EMERG, zone->shm.log, 0,
            "creditloop: worker_processes %i after the http block is more "
            "than the %ui workers the module sized its zone for: "
            "put worker_processes first",
            ccf->worker_processes, room->zone_workers);
        return NGX_ERROR;
    }
    room->entries = ngx_slab_alloc(pool, bytes);
    room->room_words =
        ngx_slab_alloc(pool, creditloop_room_words() * sizeof(uint64_t));
    if (room->entries == NULL || room->room_words == NULL) {
        ngx_log_error(NGX_LOG_EMERG, zone->shm.log, 0,
            "creditloop: the zone has no room for %ui workers' entries of %uz "
            "bytes",
            room->zone_workers, room->entry_size);
        return NGX_ERROR;
    }
    creditloop_zone_clear(room->entries, bytes);
    creditloop_zone_clear(
        room->room_words, creditloop_room_words() * sizeof(uint64_t));
    return NGX_OK;
}


/* A room's zone, sized for every worker's entry: the tenant and class counts
 * give an entry's size, worker_processes the entries (when it follows the http
 * block, the machine's CPUs: the zone's start checks it). A large slab
 * allocation takes whole pages, each with its page record. */
static ngx_int_t
ngx_http_creditloop_add_zone(ngx_conf_t *cf, ngx_http_creditloop_room_t *room)
{
    ngx_str_t        name;
    ngx_core_conf_t *ccf =
        (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx, ngx_core_module);
    ngx_int_t workers = ccf->worker_processes;
    size_t    pages;

    if (workers == NGX_CONF_UNSET) {
        workers = ngx_max(ngx_ncpu, 1);
    }
    if (workers > NGX_HTTP_CREDITLOOP_MAX_WORKERS) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
            "creditloop: worker_processes %i is more than the %d the module "
            "supports",
            workers, NGX_HTTP_CREDITLOOP_MAX_WORKERS);
        return NGX_ERROR;
    }
    name.len = sizeof("creditloop_room_") - 1 + room->name.len;
    name.data = ngx_pnalloc(cf->pool, name.len);
    if (name.data == NULL) {
        return NGX_ERROR;
    }
    if (room->name.len == 0) {
        ngx_str_set(&name, "creditloop");
    } else {
        ngx_sprintf(name.data, "creditloop_room_%V", &room->name);
    }
    room->cycle = cf->cycle;
    room->zone_workers = (ngx_uint_t) workers;
    room->entry_size = ngx_http_creditloop_entry_size(room);
    pages = (room->entry_size * room->zone_workers + ngx_pagesize - 1) /
            ngx_pagesize;
    /* The pool's header, its slots and statistics fit in 8 pages at any page
     * size nginx runs on. */
    room->zone = ngx_shared_memory_add(cf, &name,
        (pages + 8) * (ngx_pagesize + sizeof(ngx_slab_page_t)) +
            8 * ngx_pagesize,
        &ngx_http_creditloop_module);
    if (room->zone == NULL) {
        return NGX_ERROR;
    }
    room->zone->init = ngx_http_creditloop_init_zone;
    room->zone->data = room;
    room->zone->noreuse = 1;
    return NGX_OK;
}


/* A room's own state of every tenant, its metrics' labels and its zone. */
static ngx_int_t
ngx_http_creditloop_init_room(ngx_conf_t *cf, ngx_http_creditloop_room_t *room)
{
    ngx_http_creditloop_main_conf_t *mcf = room->mcf;
    ngx_http_creditloop_tenant_t    *t;

    if (ngx_array_init(&room->tenants, cf->pool, mcf->tenants.nelts,
            sizeof(ngx_http_creditloop_tenant_t)) != NGX_OK) {
        return NGX_ERROR;
    }
    t = ngx_array_push_n(&room->tenants, mcf->tenants.nelts);
    if (t == NULL) {
        return NGX_ERROR;
    }
    ngx_memcpy(t, mcf->tenants.elts,
        mcf->tenants.nelts * sizeof(ngx_http_creditloop_tenant_t));
    room->classes = mcf->classes;
    if (mcf->unknown_tenant.len != 0) {
        room->default_tenant = ngx_http_creditloop_find_tenant(
            &room->tenants, &mcf->unknown_tenant);
    }
    if (room->name.len != 0) {
        room->label.len = sizeof("room=\"\",") - 1 + room->name.len;
        room->selector.len = room->label.len + 1;
        room->label.data = ngx_pnalloc(cf->pool, room->label.len);
        room->selector.data = ngx_pnalloc(cf->pool, room->selector.len);
        if (room->label.data == NULL || room->selector.data == NULL) {
            return NGX_ERROR;
        }
        ngx_sprintf(room->label.data, "room=\"%V\",", &room->name);
        ngx_sprintf(room->selector.data, "{room=\"%V\"}", &room->name);
    }
    return ngx_http_creditloop_add_zone(cf, room);
}


static void
ngx_http_creditloop_close_wake_fds(void *data)
{
    ngx_http_creditloop_main_conf_t *mcf = data;
    ngx_uint_t                       w;

    for (w = 0; w < mcf->wake_count; ++w) {
        if (mcf->wake_fds[w] != NGX_INVALID_FILE) {
            (void) close(mcf->wake_fds[w]);
        }
    }
}


/* The workers' eventfds, made here in the master so that every worker inherits
 * every one; closed with the configuration's pool. */
static ngx_int_t
ngx_http_creditloop_add_wake_fds(
    ngx_conf_t *cf, ngx_http_creditloop_main_conf_t *mcf, ngx_uint_t workers)
{
    ngx_pool_cleanup_t *cln;
    ngx_uint_t          w;

    if (workers < 2) {
        return NGX_OK;
    }
    mcf->wake_fds = ngx_palloc(cf->pool, workers * sizeof(ngx_fd_t));
    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (mcf->wake_fds == NULL || cln == NULL) {
        return NGX_ERROR;
    }
    for (w = 0; w < workers; ++w) {
        mcf->wake_fds[w] = NGX_INVALID_FILE;
    }
    mcf->wake_count = workers;
    cln->handler = ngx_http_creditloop_close_wake_fds;
    cln->data = mcf;
    for (w = 0; w < workers; ++w) {
        mcf->wake_fds[w] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (mcf->wake_fds[w] == NGX_INVALID_FILE) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                "creditloop: eventfd() for worker %ui of %ui failed", w,
                workers);
            return NGX_ERROR;
        }
    }
    return NGX_OK;
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
        if (ngx_http_creditloop_init_room(cf, rooms[i]) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }
    if (ngx_http_creditloop_add_wake_fds(cf, mcf, rooms[0]->zone_workers) !=
        NGX_OK) {
        return NGX_CONF_ERROR;
    }
    return NGX_CONF_OK;
}


/* A room's size, checked as it is read so that `nginx -t` names the directive's
 * line: a slot count, or `auto` with optional `min=N` and `max=N` after it (a
 * room the backend's latency sets, between them). */
static char *
ngx_http_creditloop_parse_slots(ngx_http_creditloop_room_t *room,
    ngx_str_t *value, ngx_str_t *bounds, ngx_uint_t nbounds)
{
    ngx_int_t  n;
    ngx_uint_t i;

    if (value->len == 4 && ngx_strncmp(value->data, "auto", 4) == 0) {
        room->learned = 1;
        room->least = 1;
        room->most = 256;
        for (i = 0; i < nbounds; ++i) {
            if (bounds[i].len > 4 &&
                ngx_strncmp(bounds[i].data, "min=", 4) == 0) {
                n = ngx_atoi(bounds[i].data + 4, bounds[i].len - 4);
                if (n < 1 || n > NGX_HTTP_CREDITLOOP_MAX_SLOTS) {
                    return "invalid min: from 1 to 1000000";
                }
                room->least = (ngx_uint_t) n;
            } else if (bounds[i].len > 4 &&
                       ngx_strncmp(bounds[i].data, "max=", 4) == 0) {
                n = ngx_atoi(bounds[i].data + 4, bounds[i].len - 4);
                if (n < 1 || n > NGX_HTTP_CREDITLOOP_MAX_SLOTS) {
                    return "invalid max: from 1 to 1000000";
                }
                room->most = (ngx_uint_t) n;
            } else {
                return "invalid parameter: \"min=N\" or \"max=N\" expected";
            }
        }
        if (room->least > room->most) {
            return "invalid value: min is above max";
        }
        /* The room starts at its least, and the core is reserved for its
         * most. */
        room->slots = room->least;
        return NGX_CONF_OK;
    }
    if (nbounds != 0) {
        return "invalid parameter: \"min=\" and \"max=\" go with \"auto\" only";
    }
    n = ngx_atoi(value->data, value->len);
    if (n < 1 || n > NGX_HTTP_CREDITLOOP_MAX_SLOTS) {
        return "invalid value: from 1 to 1000000, or auto";
    }
    room->slots = (ngx_uint_t) n;
    room->most = room->slots;
    return NGX_CONF_OK;
}


static char *
ngx_http_creditloop_slots(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_main_conf_t *mcf = conf;
    ngx_str_t                       *value = cf->args->elts;

    (void) cmd;
    if (mcf->room->slots != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }
    return ngx_http_creditloop_parse_slots(
        mcf->room, &value[1], &value[2], cf->args->nelts - 2);
}


static ngx_http_creditloop_room_t *
ngx_http_creditloop_find_room(
    ngx_http_creditloop_main_conf_t *mcf, ngx_str_t *name)
{
    ngx_http_creditloop_room_t **rooms = mcf->rooms.elts;
    ngx_uint_t                   i;

    for (i = 1; i < mcf->rooms.nelts; ++i) {
        if (rooms[i]->name.len == name->len &&
            ngx_strncmp(rooms[i]->name.data, name->data, name->len) == 0) {
            return rooms[i];
        }
    }
    return NULL;
}


/* `creditloop_room NAME slots=N;` (or `slots=auto [min=N] [max=N]`): a room of
 * its own for the locations that name it, as limit_req_zone is for limit_req.
 */
static char *
ngx_http_creditloop_room(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_main_conf_t *mcf = conf;
    ngx_str_t                       *value = cf->args->elts;
    ngx_http_creditloop_room_t      *room;
    ngx_str_t                        slots;
    ngx_uint_t                       i;

    (void) cmd;
    if (cf->args->nelts > 5) {
        return "invalid parameters: NAME slots=N, or NAME slots=auto [min=N] "
               "[max=N]";
    }
    if (value[1].len == 0 || value[1].len > 64) {
        return "invalid name: from 1 to 64 letters, digits, \"_\" or \"-\"";
    }
    for (i = 0; i < value[1].len; ++i) {
        u_char ch = value[1].data[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                (ch >= '0' && ch <= '9') || ch == '_' || ch == '-')) {
            return "invalid name: from 1 to 64 letters, digits, \"_\" or \"-\"";
        }
    }
    if (ngx_http_creditloop_find_room(mcf, &value[1]) != NULL) {
        return "is duplicate: a room of that name exists";
    }
    if (value[2].len <= sizeof("slots=") - 1 ||
        ngx_strncmp(value[2].data, "slots=", sizeof("slots=") - 1) != 0) {
        return "invalid parameter: \"slots=N\" expected";
    }
    room = ngx_http_creditloop_new_room(cf, mcf);
    if (room == NULL) {
        return NGX_CONF_ERROR;
    }
    room->name = value[1];
    slots.data = value[2].data + sizeof("slots=") - 1;
    slots.len = value[2].len - (sizeof("slots=") - 1);
    return ngx_http_creditloop_parse_slots(
        room, &slots, &value[3], cf->args->nelts - 3);
}


static char *
ngx_http_creditloop_room_use(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_loc_conf_t  *lcf = conf;
    ngx_str_t                       *value = cf->args->elts;
    ngx_http_creditloop_main_conf_t *mcf;

    (void) cmd;
    if (lcf->room != NULL) {
        return "is duplicate";
    }
    mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_creditloop_module);
    lcf->room = ngx_http_creditloop_find_room(mcf, &value[1]);
    if (lcf->room == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
            "\"creditloop_room_use\": no room \"%V\": define it with "
            "\"creditloop_room %V slots=N;\" before, in the http block",
            &value[1], &value[1]);
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
