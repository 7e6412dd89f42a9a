/* ngx_http_creditloop_module: creditloop's per-tenant queues, classes and charge-back as a
 * phase of nginx's request processing (docs/nginx.md).
 *
 * Each worker holds a creditloop core (through the C API, creditloop/creditloop.h). A request
 * whose location names a tenant variable enters its tenant's queue in the preaccess phase and
 * stops there; the worker's core decides while the worker has room (creditloop_slots); a
 * decided request resumes its phases through a posted write event; its end (the request's pool
 * cleanup, whatever ends it) charges its cost and gives its room back, which decides the next
 * ones. Everything runs on the worker's event loop: no thread, no lock, no polling. The core is
 * work-conserving (a queued request goes out unmetered when no credit is left), so work waits only
 * for room, never for a credit instant: the only timers are the opt-in queue timeouts.
 */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "creditloop/creditloop.h"
#include "creditloop_share.h"

#define NGX_HTTP_CREDITLOOP_BATCH 64
#define NGX_HTTP_CREDITLOOP_MAX_NAME 64
/* Workers a shared zone has an entry for. */
#define NGX_HTTP_CREDITLOOP_MAX_WORKERS 64
/* An entry not rewritten for this many epochs is a worker gone (a reload's old workers, one
 * that crashed): its demand no longer counts. */
#define NGX_HTTP_CREDITLOOP_TTL_EPOCHS 3

/* One worker's entry in the shared zone. Written by that worker alone, read by every worker;
 * the demands are read without a lock, so a reader may see one epoch's demand of one tenant
 * beside the previous epoch's of another, which the rule tolerates as the fleet's store does
 * (each fraction is of one tenant's demands). */
typedef struct {
  ngx_atomic_uint_t stamp_ms;   /* when it last wrote; 0: never */
  ngx_atomic_uint_t generation; /* of the configuration it was written under */
  ngx_atomic_uint_t room;       /* its total demand, for the room's share */
  /* [tenants] demands per tenant, in sorted tenant order, then [tenants x (classes + 1)]
   * dispatch counters, for the metrics of every worker together. */
  ngx_atomic_uint_t demand[1];
} ngx_http_creditloop_entry_t;

#define NGX_HTTP_CREDITLOOP_ENTRY_SIZE(tenants, classes)  \
  (offsetof(ngx_http_creditloop_entry_t, demand) +         \
   (tenants) * (1 + (size_t)(classes) + 1) * sizeof(ngx_atomic_uint_t))

/* Two blocks of entries, used by configurations in turn: the old workers of a reload go on
 * writing the block of their configuration while the new ones start on the other, so the two
 * generations never share a word (workers of both are numbered from 0). A block is reused at the
 * reload after next, by when a reload's old workers have normally finished. */
typedef struct {
  ngx_atomic_uint_t generation; /* bumped by each configuration that takes the zone over */
  u_char *blocks[2];
} ngx_http_creditloop_shared_t;

typedef struct {
  ngx_str_t name;
  ngx_str_t plan;
  uint32_t shares;
  ngx_uint_t queue_limit;     /* 0: none */
  ngx_msec_t queue_timeout;   /* 0: none */
  creditloop_participant id;  /* in this worker's core */
  ngx_uint_t queued;          /* in this worker's core now */
  uint64_t refused_limit;     /* answered 503 at the queue limit */
  uint64_t refused_timeout;   /* answered 503 at the queue timeout */
  uint64_t withdrawn;         /* clients gone while queued */
  uint64_t dispatched_epoch;  /* dispatched in this worker since the last epoch */
  uint32_t fraction;          /* of its plan this worker enforces, in millionths */
} ngx_http_creditloop_tenant_t;

typedef struct {
  /* configuration */
  ngx_str_t config_path;
  ngx_uint_t config_line;
  creditloop_config *config;
  ngx_uint_t slots;
  double cost_unit_ms;
  ngx_str_t unknown_tenant; /* empty: 401 */
  ngx_uint_t queue_limit;
  ngx_msec_t queue_timeout;
  ngx_array_t tenants; /* of ngx_http_creditloop_tenant_t, sorted by name */
  ngx_http_creditloop_tenant_t *default_tenant;
  int classes;
  ngx_msec_t epoch;
  ngx_shm_zone_t *zone;
  u_char *entries; /* this configuration's block in the zone */
  size_t entry_size;

  /* this worker's */
  ngx_uint_t room;    /* its share of creditloop_slots: the slots it may fill */
  ngx_uint_t workers; /* worker_processes */
  ngx_uint_t generation;
  ngx_event_t epoch_event;
  ngx_atomic_uint_t *counters; /* this worker's dispatch counters in the zone */
  creditloop_core *core;
  ngx_uint_t in_flight;
  uint64_t unauthorized;
  ngx_event_t dispatch_event;
  creditloop_decision decisions[NGX_HTTP_CREDITLOOP_BATCH];
} ngx_http_creditloop_main_conf_t;

typedef struct {
  ngx_http_complex_value_t *tenant; /* null: the module is off here */
  ngx_http_complex_value_t *cost;
  ngx_flag_t off;
} ngx_http_creditloop_loc_conf_t;

enum {
  CTX_QUEUED = 1,
  CTX_DISPATCHED,
  CTX_COMPLETED,
  CTX_REFUSED
};

typedef struct ngx_http_creditloop_ctx_s {
  /* First: the record the core links into its queue. */
  creditloop_request record;
  ngx_http_request_t *request; /* null once the request has ended while its record is queued */
  ngx_http_creditloop_main_conf_t *mcf;
  ngx_http_creditloop_tenant_t *tenant;
  creditloop_ticket ticket;
  ngx_uint_t state;
  int out_class;
  int64_t queued_at;
  int64_t dispatched_at;
  double cost;
  unsigned cost_known : 1;
  ngx_event_t timeout;
} ngx_http_creditloop_ctx_t;

static ngx_int_t ngx_http_creditloop_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_creditloop_add_variables(ngx_conf_t *cf);
static void *ngx_http_creditloop_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_creditloop_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_creditloop_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_creditloop_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
static char *ngx_http_creditloop_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_tenant(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_cost_unit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static char *ngx_http_creditloop_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_creditloop_init_process(ngx_cycle_t *cycle);
static void ngx_http_creditloop_exit_process(ngx_cycle_t *cycle);

static ngx_command_t ngx_http_creditloop_commands[] = {
    {ngx_string("creditloop_config"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_http_creditloop_config, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_slots"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_num_slot,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(ngx_http_creditloop_main_conf_t, slots), NULL},
    {ngx_string("creditloop_cost_unit"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_http_creditloop_cost_unit, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_unknown_tenant"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_str_slot, NGX_HTTP_MAIN_CONF_OFFSET,
     offsetof(ngx_http_creditloop_main_conf_t, unknown_tenant), NULL},
    {ngx_string("creditloop_queue_limit"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_num_slot, NGX_HTTP_MAIN_CONF_OFFSET,
     offsetof(ngx_http_creditloop_main_conf_t, queue_limit), NULL},
    {ngx_string("creditloop_queue_timeout"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_msec_slot, NGX_HTTP_MAIN_CONF_OFFSET,
     offsetof(ngx_http_creditloop_main_conf_t, queue_timeout), NULL},
    {ngx_string("creditloop_epoch"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_msec_slot,
     NGX_HTTP_MAIN_CONF_OFFSET, offsetof(ngx_http_creditloop_main_conf_t, epoch), NULL},
    {ngx_string("creditloop_tenant"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_http_creditloop_tenant, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
    {ngx_string("creditloop_cost"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_TAKE1,
     ngx_http_set_complex_value_slot, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_creditloop_loc_conf_t, cost), NULL},
    {ngx_string("creditloop_status"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
     ngx_http_creditloop_status, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},
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
                                           &ngx_http_creditloop_module_ctx,
                                           ngx_http_creditloop_commands,
                                           NGX_HTTP_MODULE,
                                           NULL,                               /* init master */
                                           NULL,                               /* init module */
                                           ngx_http_creditloop_init_process,   /* init process */
                                           NULL,                               /* init thread */
                                           NULL,                               /* exit thread */
                                           ngx_http_creditloop_exit_process,   /* exit process */
                                           NULL,                               /* exit master */
                                           NGX_MODULE_V1_PADDING};

static int64_t ngx_http_creditloop_now(void) {
  /* CLOCK_MONOTONIC through the vDSO: no system call, and the core wants nanoseconds, which
   * nginx's cached millisecond clock does not give. */
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- configuration ------------------------------------------------------------------------ */

static void *ngx_http_creditloop_create_main_conf(ngx_conf_t *cf) {
  ngx_http_creditloop_main_conf_t *mcf = ngx_pcalloc(cf->pool, sizeof(*mcf));
  if (mcf == NULL) return NULL;
  mcf->slots = NGX_CONF_UNSET_UINT;
  mcf->cost_unit_ms = -1;
  mcf->queue_limit = NGX_CONF_UNSET_UINT;
  mcf->queue_timeout = NGX_CONF_UNSET_MSEC;
  mcf->epoch = NGX_CONF_UNSET_MSEC;
  if (ngx_array_init(&mcf->tenants, cf->pool, 8, sizeof(ngx_http_creditloop_tenant_t)) !=
      NGX_OK) {
    return NULL;
  }
  return mcf;
}

static void ngx_http_creditloop_free_config(void *data) {
  creditloop_config_free(data);
}

static ngx_int_t ngx_http_creditloop_tenant_cmp(const void *a, const void *b) {
  const ngx_http_creditloop_tenant_t *x = a, *y = b;
  return ngx_memn2cmp(x->name.data, y->name.data, x->name.len, y->name.len);
}

static ngx_http_creditloop_tenant_t *ngx_http_creditloop_find_tenant(
    ngx_http_creditloop_main_conf_t *mcf, ngx_str_t *name) {
  /* Sorted at configuration: O(log tenants) per request. */
  ngx_http_creditloop_tenant_t *t = mcf->tenants.elts;
  ngx_int_t lo = 0, hi = (ngx_int_t)mcf->tenants.nelts - 1;
  while (lo <= hi) {
    ngx_int_t mid = (lo + hi) / 2;
    ngx_int_t c = ngx_memn2cmp(name->data, t[mid].name.data, name->len, t[mid].name.len);
    if (c == 0) return &t[mid];
    if (c < 0) {
      hi = mid - 1;
    } else {
      lo = mid + 1;
    }
  }
  return NULL;
}

static char *ngx_http_creditloop_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
  ngx_http_creditloop_main_conf_t *mcf = conf;
  ngx_str_t *value = cf->args->elts;
  ngx_file_t file;
  ngx_file_info_t fi;
  u_char *text;
  ssize_t n;
  char message[512];
  creditloop_status status;
  ngx_pool_cleanup_t *cln;
  size_t i, count;

  (void)cmd;
  if (mcf->config != NULL) return "is duplicate";
  mcf->config_path = value[1];
  if (ngx_conf_full_name(cf->cycle, &mcf->config_path, 1) != NGX_OK) return NGX_CONF_ERROR;
  mcf->config_line = cf->conf_file->line;

  ngx_memzero(&file, sizeof(file));
  file.name = mcf->config_path;
  file.log = cf->log;
  file.fd = ngx_open_file(mcf->config_path.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
  if (file.fd == NGX_INVALID_FILE) {
    ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno, "creditloop_config: cannot open \"%V\"",
                       &mcf->config_path);
    return NGX_CONF_ERROR;
  }
  if (ngx_fd_info(file.fd, &fi) == NGX_FILE_ERROR || ngx_file_size(&fi) > 16 * 1024 * 1024) {
    ngx_close_file(file.fd);
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "creditloop_config: \"%V\" is not a readable file",
                       &mcf->config_path);
    return NGX_CONF_ERROR;
  }
  text = ngx_pnalloc(cf->temp_pool, (size_t)ngx_file_size(&fi) + 1);
  if (text == NULL) {
    ngx_close_file(file.fd);
    return NGX_CONF_ERROR;
  }
  n = ngx_read_file(&file, text, (size_t)ngx_file_size(&fi), 0);
  ngx_close_file(file.fd);
  if (n < 0) return NGX_CONF_ERROR;

  status = creditloop_config_parse_json((const char *)text, (size_t)n, &mcf->config, message,
                                        sizeof(message));
  if (status != CREDITLOOP_OK) {
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "creditloop_config \"%V\": %s",
                       &mcf->config_path,
                       status == CREDITLOOP_BAD_CONFIG ? message : creditloop_strerror(status));
    return NGX_CONF_ERROR;
  }
  cln = ngx_pool_cleanup_add(cf->pool, 0);
  if (cln == NULL) return NGX_CONF_ERROR;
  cln->handler = ngx_http_creditloop_free_config;
  cln->data = mcf->config;

  mcf->classes = creditloop_config_classes(mcf->config);
  count = creditloop_config_tenants(mcf->config);
  for (i = 0; i < count; ++i) {
    creditloop_tenant_config tc;
    ngx_http_creditloop_tenant_t *t;
    (void)creditloop_config_tenant(mcf->config, i, &tc);
    t = ngx_array_push(&mcf->tenants);
    if (t == NULL) return NGX_CONF_ERROR;
    ngx_memzero(t, sizeof(*t));
    t->name.len = ngx_strlen(tc.name);
    t->name.data = ngx_pstrdup(cf->pool, &(ngx_str_t){t->name.len, (u_char *)tc.name});
    t->plan.len = ngx_strlen(tc.plan);
    t->plan.data = ngx_pnalloc(cf->pool, t->plan.len + 1);
    if (t->name.data == NULL || t->plan.data == NULL) return NGX_CONF_ERROR;
    ngx_cpystrn(t->plan.data, (u_char *)tc.plan, t->plan.len + 1);
    t->shares = tc.shares;
    t->queue_limit = tc.queue_limit;
    t->queue_timeout = (ngx_msec_t)tc.queue_timeout_ms;
  }
  if (mcf->tenants.nelts == 0) {
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "creditloop_config \"%V\": tenants: none named",
                       &mcf->config_path);
    return NGX_CONF_ERROR;
  }
  ngx_sort(mcf->tenants.elts, mcf->tenants.nelts, sizeof(ngx_http_creditloop_tenant_t),
           ngx_http_creditloop_tenant_cmp);
  return NGX_CONF_OK;
}

static char *ngx_http_creditloop_cost_unit(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
  /* A duration, in nginx's own notation with fractions allowed ("1ms", "0.5ms", "2s"). */
  ngx_http_creditloop_main_conf_t *mcf = conf;
  ngx_str_t *value = cf->args->elts;
  char buf[64];
  char *end;
  double x, scale = 1;
  size_t len = value[1].len;
  (void)cmd;
  if (mcf->cost_unit_ms > 0) return "is duplicate";
  if (len == 0 || len >= sizeof(buf)) return "invalid value";
  ngx_memcpy(buf, value[1].data, len);
  buf[len] = '\0';
  x = strtod(buf, &end);
  if (ngx_strcmp(end, "ms") == 0) {
    scale = 1;
  } else if (ngx_strcmp(end, "s") == 0) {
    scale = 1000;
  } else if (ngx_strcmp(end, "us") == 0) {
    scale = 0.001;
  } else if (*end != '\0') {
    return "invalid value: a duration such as 1ms, 0.5ms or 2s";
  }
  x *= scale;
  if (!isfinite(x) || x <= 0 || x > 3.6e6) return "invalid value: a duration above 0";
  mcf->cost_unit_ms = x;
  return NGX_CONF_OK;
}

static ngx_int_t ngx_http_creditloop_init_zone(ngx_shm_zone_t *zone, void *data) {
  ngx_http_creditloop_main_conf_t *mcf = zone->data;
  ngx_slab_pool_t *pool = (ngx_slab_pool_t *)zone->shm.addr;
  ngx_http_creditloop_shared_t *shared;
  size_t entry = NGX_HTTP_CREDITLOOP_ENTRY_SIZE(mcf->tenants.nelts, mcf->classes);
  (void)data;
  /* Each configuration starts its own layout (tenants may have changed); the old workers of a
   * reload go on writing theirs under the old generation, which the new ones ignore. The size
   * depends on the tenant count, so a zone kept across a reload has room for this layout. */
  if (pool->data != NULL) {
    shared = pool->data;
  } else {
    shared = ngx_slab_alloc(pool, sizeof(*shared));
    if (shared == NULL) return NGX_ERROR;
    ngx_memzero(shared, sizeof(*shared));
    shared->blocks[0] = ngx_slab_alloc(pool, entry * NGX_HTTP_CREDITLOOP_MAX_WORKERS);
    shared->blocks[1] = ngx_slab_alloc(pool, entry * NGX_HTTP_CREDITLOOP_MAX_WORKERS);
    if (shared->blocks[0] == NULL || shared->blocks[1] == NULL) return NGX_ERROR;
    pool->data = shared;
  }
  /* Here in the master, before any worker of this configuration forks. */
  mcf->generation = ++shared->generation;
  mcf->entries = shared->blocks[mcf->generation & 1];
  mcf->entry_size = entry;
  ngx_memzero(mcf->entries, entry * NGX_HTTP_CREDITLOOP_MAX_WORKERS);
  zone->data = mcf;
  return NGX_OK;
}

static char *ngx_http_creditloop_init_main_conf(ngx_conf_t *cf, void *conf) {
  ngx_http_creditloop_main_conf_t *mcf = conf;
  ngx_http_creditloop_tenant_t *t;
  ngx_uint_t i;
  ngx_conf_init_uint_value(mcf->slots, 64);
  ngx_conf_init_uint_value(mcf->queue_limit, 0);
  ngx_conf_init_msec_value(mcf->queue_timeout, 0);
  ngx_conf_init_msec_value(mcf->epoch, 250);
  if (mcf->cost_unit_ms <= 0) mcf->cost_unit_ms = 1;
  if (mcf->slots == 0 || mcf->slots > 1000000) {
    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"creditloop_slots\" must be 1 to 1000000");
    return NGX_CONF_ERROR;
  }
  if (mcf->config == NULL) return NGX_CONF_OK;
  t = mcf->tenants.elts;
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    if (t[i].queue_limit == 0) t[i].queue_limit = mcf->queue_limit;
    if (t[i].queue_timeout == 0) t[i].queue_timeout = mcf->queue_timeout;
  }
  {
    ngx_str_t name = ngx_string("creditloop");
    size_t entry = NGX_HTTP_CREDITLOOP_ENTRY_SIZE(mcf->tenants.nelts, mcf->classes);
    size_t size = 8 * ngx_pagesize + 2 * entry * NGX_HTTP_CREDITLOOP_MAX_WORKERS; /* 2 blocks */
    size = ngx_align(size, ngx_pagesize);
    mcf->zone = ngx_shared_memory_add(cf, &name, size, &ngx_http_creditloop_module);
    if (mcf->zone == NULL) return NGX_CONF_ERROR;
    mcf->zone->init = ngx_http_creditloop_init_zone;
    mcf->zone->data = mcf;
  }
  if (mcf->unknown_tenant.len != 0) {
    mcf->default_tenant = ngx_http_creditloop_find_tenant(mcf, &mcf->unknown_tenant);
    if (mcf->default_tenant == NULL) {
      ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                         "\"creditloop_unknown_tenant\": \"%V\" is not a tenant of \"%V\"",
                         &mcf->unknown_tenant, &mcf->config_path);
      return NGX_CONF_ERROR;
    }
  }
  return NGX_CONF_OK;
}

static void *ngx_http_creditloop_create_loc_conf(ngx_conf_t *cf) {
  ngx_http_creditloop_loc_conf_t *lcf = ngx_pcalloc(cf->pool, sizeof(*lcf));
  if (lcf == NULL) return NULL;
  lcf->off = NGX_CONF_UNSET;
  return lcf;
}

static char *ngx_http_creditloop_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child) {
  ngx_http_creditloop_loc_conf_t *prev = parent, *conf = child;
  ngx_conf_merge_value(conf->off, prev->off, 0);
  if (conf->tenant == NULL && !conf->off) conf->tenant = prev->tenant;
  if (conf->cost == NULL) conf->cost = prev->cost;
  if (conf->cost == NULL) {
    ngx_http_compile_complex_value_t ccv;
    ngx_str_t source = ngx_string("$upstream_http_x_cost");
    conf->cost = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
    if (conf->cost == NULL) return NGX_CONF_ERROR;
    ngx_memzero(&ccv, sizeof(ccv));
    ccv.cf = cf;
    ccv.value = &source;
    ccv.complex_value = conf->cost;
    if (ngx_http_compile_complex_value(&ccv) != NGX_OK) return NGX_CONF_ERROR;
  }
  return NGX_CONF_OK;
}

static char *ngx_http_creditloop_tenant(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
  ngx_http_creditloop_loc_conf_t *lcf = conf;
  ngx_str_t *value = cf->args->elts;
  ngx_http_compile_complex_value_t ccv;
  ngx_http_creditloop_main_conf_t *mcf;
  (void)cmd;
  if (lcf->tenant != NULL || lcf->off != NGX_CONF_UNSET) return "is duplicate";
  if (ngx_strcmp(value[1].data, "off") == 0) {
    lcf->off = 1;
    return NGX_CONF_OK;
  }
  mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_creditloop_module);
  if (mcf->config == NULL) return "needs \"creditloop_config\" before it, in the http block";
  lcf->off = 0;
  lcf->tenant = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
  if (lcf->tenant == NULL) return NGX_CONF_ERROR;
  ngx_memzero(&ccv, sizeof(ccv));
  ccv.cf = cf;
  ccv.value = &value[1];
  ccv.complex_value = lcf->tenant;
  if (ngx_http_compile_complex_value(&ccv) != NGX_OK) return NGX_CONF_ERROR;
  return NGX_CONF_OK;
}

/* ---- the worker's core -------------------------------------------------------------------- */

static void ngx_http_creditloop_dispatch_handler(ngx_event_t *ev);
static void ngx_http_creditloop_epoch_handler(ngx_event_t *ev);
static void ngx_http_creditloop_schedule(ngx_http_creditloop_main_conf_t *mcf);

static ngx_http_creditloop_entry_t *ngx_http_creditloop_entry(ngx_http_creditloop_main_conf_t *mcf,
                                                              ngx_uint_t worker) {
  return (ngx_http_creditloop_entry_t *)(mcf->entries + worker * mcf->entry_size);
}

/* This worker's share of the room: the same rule as a tenant's plan, on the workers' total
 * demands, at least one slot so that no worker holds requests it can never start. */
static ngx_uint_t ngx_http_creditloop_room(ngx_http_creditloop_main_conf_t *mcf,
                                           uint32_t millionths) {
  uint64_t room = (uint64_t)mcf->slots * millionths / CREDITLOOP_WHOLE_PLAN;
  return room == 0 ? 1 : (ngx_uint_t)room;
}

/* Once per epoch (several workers only): publish this worker's demand per tenant (queued now
 * plus dispatched in the epoch), then take, for each tenant, the fraction of its plan the rule
 * gives this worker's demand among the live workers' (a worker whose entry is older than
 * NGX_HTTP_CREDITLOOP_TTL_EPOCHS epochs is gone), and the room likewise. */
static void ngx_http_creditloop_epoch(ngx_http_creditloop_main_conf_t *mcf) {
  ngx_http_creditloop_tenant_t *t = mcf->tenants.elts;
  ngx_http_creditloop_entry_t *own = ngx_http_creditloop_entry(mcf, ngx_worker);
  ngx_msec_t now = ngx_current_msec, ttl = mcf->epoch * NGX_HTTP_CREDITLOOP_TTL_EPOCHS;
  ngx_uint_t i, w, live = 0, room_changed;
  uint64_t own_room = 0, all_room = 0;
  int64_t now_ns = ngx_http_creditloop_now();
  uint32_t f;

  for (i = 0; i < mcf->tenants.nelts; ++i) {
    uint64_t d = t[i].queued + t[i].dispatched_epoch;
    t[i].dispatched_epoch = 0;
    own_room += d;
    /* Relaxed: each value stands alone; the stamp below orders them for readers. */
    __atomic_store_n(&own->demand[i], (ngx_atomic_uint_t)d, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&own->room, (ngx_atomic_uint_t)own_room, __ATOMIC_RELAXED);
  __atomic_store_n(&own->generation, (ngx_atomic_uint_t)mcf->generation, __ATOMIC_RELAXED);
  /* Release: pairs with the acquire load of stamp_ms below, in the other workers, so that a
   * reader that sees this stamp sees the demands written before it. */
  __atomic_store_n(&own->stamp_ms, (ngx_atomic_uint_t)(now == 0 ? 1 : now), __ATOMIC_RELEASE);

  for (i = 0; i < mcf->tenants.nelts; ++i) {
    uint64_t total = 0;
    uint64_t mine = __atomic_load_n(&own->demand[i], __ATOMIC_RELAXED); /* our own write */
    live = 0;
    for (w = 0; w < NGX_HTTP_CREDITLOOP_MAX_WORKERS; ++w) {
      ngx_http_creditloop_entry_t *e = ngx_http_creditloop_entry(mcf, w);
      /* Acquire: pairs with the release store of stamp_ms above, in worker w. */
      ngx_msec_t stamp = __atomic_load_n(&e->stamp_ms, __ATOMIC_ACQUIRE);
      if (stamp == 0 || now - stamp > ttl) continue;
      if (__atomic_load_n(&e->generation, __ATOMIC_RELAXED) != mcf->generation) continue;
      live++;
      total += __atomic_load_n(&e->demand[i], __ATOMIC_RELAXED);
      if (i == 0) all_room += __atomic_load_n(&e->room, __ATOMIC_RELAXED);
    }
    f = creditloop_share_fraction(mine, total, live == 0 ? 1 : (uint32_t)live);
    if (f != t[i].fraction) {
      if (creditloop_scale(mcf->core, t[i].id, f, now_ns) == CREDITLOOP_OK) t[i].fraction = f;
    }
  }
  if (mcf->tenants.nelts == 0) return;
  f = creditloop_share_fraction(own_room, all_room, live == 0 ? 1 : (uint32_t)live);
  room_changed = ngx_http_creditloop_room(mcf, f) != mcf->room;
  mcf->room = ngx_http_creditloop_room(mcf, f);
  if (room_changed) ngx_http_creditloop_schedule(mcf);
}

static void ngx_http_creditloop_epoch_handler(ngx_event_t *ev) {
  ngx_http_creditloop_main_conf_t *mcf = ev->data;
  ngx_http_creditloop_epoch(mcf);
  ngx_add_timer(ev, mcf->epoch);
}

static ngx_int_t ngx_http_creditloop_init_process(ngx_cycle_t *cycle) {
  ngx_http_creditloop_main_conf_t *mcf;
  ngx_http_creditloop_tenant_t *t;
  ngx_uint_t i;
  char message[512];
  creditloop_status status;
  int64_t now;

  mcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_creditloop_module);
  if (mcf == NULL || mcf->config == NULL) return NGX_OK;
  status = creditloop_core_new(mcf->config, &mcf->core, message, sizeof(message));
  if (status != CREDITLOOP_OK) {
    ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "creditloop: %s",
                  status == CREDITLOOP_BAD_CONFIG ? message : creditloop_strerror(status));
    return NGX_ERROR;
  }
  /* Room for every slot in flight plus what a worker queues at once: the request path then
   * allocates nothing in the core. */
  if (creditloop_reserve(mcf->core, mcf->tenants.nelts, mcf->slots) != CREDITLOOP_OK) {
    return NGX_ERROR;
  }
  now = ngx_http_creditloop_now();
  t = mcf->tenants.elts;
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    status = creditloop_add(mcf->core, (const char *)t[i].name.data, (const char *)t[i].plan.data,
                            t[i].shares, now, &t[i].id);
    if (status != CREDITLOOP_OK) {
      ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "creditloop: tenant \"%V\": %s", &t[i].name,
                    creditloop_strerror(status));
      return NGX_ERROR;
    }
  }
  mcf->dispatch_event.handler = ngx_http_creditloop_dispatch_handler;
  mcf->dispatch_event.data = mcf;
  mcf->dispatch_event.log = cycle->log;

  {
    ngx_core_conf_t *ccf = (ngx_core_conf_t *)ngx_get_conf(cycle->conf_ctx, ngx_core_module);
    mcf->workers = ccf->worker_processes;
  }
  mcf->room = mcf->slots;
  {
    if (ngx_worker >= NGX_HTTP_CREDITLOOP_MAX_WORKERS) {
      ngx_log_error(NGX_LOG_EMERG, cycle->log, 0, "creditloop: at most %d workers",
                    NGX_HTTP_CREDITLOOP_MAX_WORKERS);
      return NGX_ERROR;
    }
    mcf->counters = ngx_http_creditloop_entry(mcf, ngx_worker)->demand + mcf->tenants.nelts;
    /* The entry is live for the metrics from the start, whatever the worker count. */
    /* Relaxed, as every write of it: the release store of stamp_ms below publishes it. */
    __atomic_store_n(&ngx_http_creditloop_entry(mcf, ngx_worker)->generation,
                     (ngx_atomic_uint_t)mcf->generation, __ATOMIC_RELAXED);
    __atomic_store_n(&ngx_http_creditloop_entry(mcf, ngx_worker)->stamp_ms,
                     (ngx_atomic_uint_t)(ngx_current_msec == 0 ? 1 : ngx_current_msec),
                     __ATOMIC_RELEASE); /* pairs with the metrics handler's acquire load */
  }
  if (mcf->workers > 1) {
    uint32_t even = creditloop_share_even((uint32_t)mcf->workers);
    /* Until the first epoch, each worker enforces 1/n of every plan and of the room, as a
     * fleet's server does at start. */
    for (i = 0; i < mcf->tenants.nelts; ++i) {
      (void)creditloop_scale(mcf->core, t[i].id, even, now);
      t[i].fraction = even;
    }
    mcf->room = ngx_http_creditloop_room(mcf, even);
    mcf->epoch_event.handler = ngx_http_creditloop_epoch_handler;
    mcf->epoch_event.data = mcf;
    mcf->epoch_event.log = cycle->log;
    /* Cancelable: a worker shutting down does not wait for its next epoch. */
    mcf->epoch_event.cancelable = 1;
    ngx_add_timer(&mcf->epoch_event, mcf->epoch);
  } else {
    for (i = 0; i < mcf->tenants.nelts; ++i) t[i].fraction = CREDITLOOP_WHOLE_PLAN;
  }
  return NGX_OK;
}

static void ngx_http_creditloop_exit_process(ngx_cycle_t *cycle) {
  ngx_http_creditloop_main_conf_t *mcf =
      ngx_http_cycle_get_module_main_conf(cycle, ngx_http_creditloop_module);
  if (mcf == NULL || mcf->core == NULL) return;
  creditloop_core_free(mcf->core);
  mcf->core = NULL;
}

static void ngx_http_creditloop_schedule(ngx_http_creditloop_main_conf_t *mcf) {
  /* Decisions are taken from a posted event, never inside the call that made room: a request
   * finalized deep in another module's code must not resume others from there. */
  ngx_post_event(&mcf->dispatch_event, &ngx_posted_events);
}

static void ngx_http_creditloop_resume(ngx_http_creditloop_ctx_t *ctx) {
  ngx_http_request_t *r = ctx->request;
  if (ctx->timeout.timer_set) {
    ngx_del_timer(&ctx->timeout);
  }
  r->read_event_handler = ngx_http_block_reading;
  r->write_event_handler = ngx_http_core_run_phases;
  /* Through the request's own connection: if it closes before the event runs, nginx drops the
   * posted event with it. */
  ngx_post_event(r->connection->write, &ngx_posted_events);
}

static void ngx_http_creditloop_dispatch(ngx_http_creditloop_main_conf_t *mcf) {
  int64_t now = ngx_http_creditloop_now();
  while (mcf->in_flight < mcf->room) {
    size_t want = mcf->room - mcf->in_flight, got, i;
    if (want > NGX_HTTP_CREDITLOOP_BATCH) want = NGX_HTTP_CREDITLOOP_BATCH;
    got = creditloop_dispatch(mcf->core, now, mcf->decisions, want);
    for (i = 0; i < got; ++i) {
      creditloop_decision *d = &mcf->decisions[i];
      ngx_http_creditloop_ctx_t *ctx = d->request->user;
      ctx->tenant->queued--;
      if (ctx->request == NULL) {
        /* Its request ended while queued and the withdrawal was refused: retire it at no cost. */
        (void)creditloop_complete(mcf->core, d->ticket, 0, now, NULL);
        ngx_free(ctx);
        continue;
      }
      ctx->state = CTX_DISPATCHED;
      ctx->ticket = d->ticket;
      ctx->out_class = d->out_class;
      ctx->dispatched_at = now;
      ctx->tenant->dispatched_epoch++;
      {
        ngx_atomic_uint_t *n = &mcf->counters[(ctx->tenant - (ngx_http_creditloop_tenant_t *)
                                                                  mcf->tenants.elts) *
                                                     (size_t)(mcf->classes + 1) +
                                                 (size_t)d->out_class];
        /* Relaxed, and not an increment: this worker alone writes it; the metrics handler's
         * relaxed loads in other workers need only a value not torn, never an order. */
        __atomic_store_n(n, __atomic_load_n(n, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
      }
      mcf->in_flight++;
      ngx_http_creditloop_resume(ctx);
    }
    if (got < want) return; /* every queue is empty */
  }
  creditloop_end_turn(mcf->core);
}

static void ngx_http_creditloop_dispatch_handler(ngx_event_t *ev) {
  ngx_http_creditloop_dispatch(ev->data);
}

/* ---- a request's life --------------------------------------------------------------------- */

/* The request's cost in credits: the cost variable's value when it is a valid one, else the
 * upstream's response time (or, without an upstream, the time since dispatch) over the cost
 * unit. `variables` is 0 in the pool's cleanup, where evaluating a variable would allocate from
 * the pool being destroyed: the log phase has computed it by then for every request that got
 * that far. */
static double ngx_http_creditloop_cost(ngx_http_creditloop_ctx_t *ctx, int variables) {
  ngx_http_request_t *r = ctx->request;
  ngx_http_creditloop_loc_conf_t *lcf;
  ngx_str_t value;
  if (ctx->cost_known) return ctx->cost;
  ctx->cost_known = 1;
  ctx->cost = 0;
  lcf = ngx_http_get_module_loc_conf(r, ngx_http_creditloop_module);
  if (variables && lcf->cost != NULL && ngx_http_complex_value(r, lcf->cost, &value) == NGX_OK &&
      value.len > 0 && value.len < 32) {
    char buf[32];
    char *end;
    double x;
    ngx_memcpy(buf, value.data, value.len);
    buf[value.len] = '\0';
    x = strtod(buf, &end);
    if (*end == '\0' && isfinite(x) && x >= 0 && x <= 1e6) {
      ctx->cost = x;
      return x;
    }
  }
  if (r->upstream_states != NULL && r->upstream_states->nelts > 0) {
    /* Every upstream tried, as $upstream_response_time lists them. */
    ngx_http_upstream_state_t *s = r->upstream_states->elts;
    ngx_uint_t i;
    double ms = 0;
    for (i = 0; i < r->upstream_states->nelts; ++i) ms += (double)s[i].response_time;
    ctx->cost = ms / ctx->mcf->cost_unit_ms;
  } else {
    ctx->cost = (double)(ngx_http_creditloop_now() - ctx->dispatched_at) / 1e6 /
                ctx->mcf->cost_unit_ms;
  }
  if (ctx->cost > 1e6) ctx->cost = 1e6;
  return ctx->cost;
}

static void ngx_http_creditloop_cleanup(void *data) {
  ngx_http_creditloop_ctx_t *ctx = data;
  ngx_http_creditloop_main_conf_t *mcf = ctx->mcf;
  if (ctx->timeout.timer_set) {
    ngx_del_timer(&ctx->timeout);
  }
  if (ctx->state == CTX_QUEUED) {
    creditloop_status s = creditloop_withdraw(mcf->core, &ctx->record);
    ctx->tenant->withdrawn++;
    if (s == CREDITLOOP_OK) {
      ctx->tenant->queued--;
      ngx_free(ctx);
    } else {
      /* Only a record this core does not hold is refused, which a queued one never is; were it
       * so, the record stays with the dispatch loop, which retires it when its turn comes,
       * rather than leave the core a freed record. */
      ngx_log_error(NGX_LOG_ALERT, ngx_cycle->log, 0, "creditloop: withdraw: %s",
                    creditloop_strerror(s));
      ctx->request = NULL;
    }
    return;
  }
  if (ctx->state == CTX_DISPATCHED) {
    double cost = ngx_http_creditloop_cost(ctx, 0);
    (void)creditloop_complete(mcf->core, ctx->ticket, cost, ngx_http_creditloop_now(), NULL);
    ctx->state = CTX_COMPLETED;
    mcf->in_flight--;
    /* Most completions under light load find nothing queued: no event to run then. */
    if (creditloop_waiting(mcf->core) != 0) ngx_http_creditloop_schedule(mcf);
  }
  ngx_free(ctx);
}

/* The request's context, also after an internal redirect, which clears every module's context:
 * found again through the pool cleanup that holds it, as the realip module finds its own, so
 * that a redirected request keeps its one place in the queue or its one slot. */
static ngx_http_creditloop_ctx_t *ngx_http_creditloop_get_ctx(ngx_http_request_t *r) {
  ngx_http_creditloop_ctx_t *ctx = ngx_http_get_module_ctx(r, ngx_http_creditloop_module);
  ngx_pool_cleanup_t *cln;
  if (ctx != NULL || !r->internal) return ctx;
  for (cln = r->pool->cleanup; cln; cln = cln->next) {
    if (cln->handler == ngx_http_creditloop_cleanup) {
      ctx = cln->data;
      ngx_http_set_ctx(r, ctx, ngx_http_creditloop_module);
      return ctx;
    }
  }
  return NULL;
}

static ngx_int_t ngx_http_creditloop_refuse(ngx_http_request_t *r, ngx_uint_t status,
                                            ngx_uint_t retry_after) {
  if (retry_after > 0) {
    ngx_table_elt_t *h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    h->hash = 1;
    ngx_str_set(&h->key, "Retry-After");
    h->value.data = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (h->value.data == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
    h->value.len = ngx_sprintf(h->value.data, "%ui", retry_after) - h->value.data;
  }
  return (ngx_int_t)status;
}

static void ngx_http_creditloop_timeout_handler(ngx_event_t *ev) {
  ngx_http_creditloop_ctx_t *ctx = ev->data;
  ngx_http_request_t *r = ctx->request;
  ngx_connection_t *c = r->connection;
  ngx_uint_t retry;
  if (ctx->state != CTX_QUEUED) return;
  if (creditloop_withdraw(ctx->mcf->core, &ctx->record) != CREDITLOOP_OK) {
    return; /* not queued here any more: it is on its way */
  }
  ctx->tenant->queued--;
  ctx->tenant->refused_timeout++;
  ctx->state = CTX_REFUSED;
  retry = (ctx->tenant->queue_timeout + 999) / 1000;
  ngx_http_finalize_request(
      r, ngx_http_creditloop_refuse(r, NGX_HTTP_SERVICE_UNAVAILABLE, retry ? retry : 1));
  ngx_http_run_posted_requests(c);
}

static ngx_int_t ngx_http_creditloop_handler(ngx_http_request_t *r) {
  ngx_http_creditloop_loc_conf_t *lcf;
  ngx_http_creditloop_main_conf_t *mcf;
  ngx_http_creditloop_ctx_t *ctx;
  ngx_http_creditloop_tenant_t *tenant;
  ngx_pool_cleanup_t *cln;
  ngx_str_t name;
  creditloop_status status;

  if (r != r->main) return NGX_DECLINED;
  ctx = ngx_http_creditloop_get_ctx(r);
  if (ctx != NULL) {
    /* Resumed once dispatched; an internal redirect keeps its place. */
    return ctx->state == CTX_QUEUED ? NGX_AGAIN : NGX_DECLINED;
  }
  lcf = ngx_http_get_module_loc_conf(r, ngx_http_creditloop_module);
  if (lcf->tenant == NULL) return NGX_DECLINED;
  mcf = ngx_http_get_module_main_conf(r, ngx_http_creditloop_module);
  if (mcf->core == NULL) return NGX_DECLINED;

  if (ngx_http_complex_value(r, lcf->tenant, &name) != NGX_OK) {
    return NGX_HTTP_INTERNAL_SERVER_ERROR;
  }
  tenant = ngx_http_creditloop_find_tenant(mcf, &name);
  if (tenant == NULL) tenant = mcf->default_tenant;
  if (tenant == NULL) {
    mcf->unauthorized++;
    return NGX_HTTP_UNAUTHORIZED;
  }
  if (tenant->queue_limit != 0 && tenant->queued >= tenant->queue_limit &&
      mcf->in_flight >= mcf->room) {
    tenant->refused_limit++;
    return ngx_http_creditloop_refuse(r, NGX_HTTP_SERVICE_UNAVAILABLE, 1);
  }

  /* Off the request's pool: a record the core holds may outlive its request (see cleanup). */
  ctx = ngx_calloc(sizeof(*ctx), r->connection->log);
  if (ctx == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
  cln = ngx_pool_cleanup_add(r->pool, 0);
  if (cln == NULL) {
    ngx_free(ctx);
    return NGX_HTTP_INTERNAL_SERVER_ERROR;
  }
  creditloop_request_init(&ctx->record, ctx);
  ctx->request = r;
  ctx->mcf = mcf;
  ctx->tenant = tenant;
  ctx->out_class = -1;
  ctx->queued_at = ngx_http_creditloop_now();
  status = creditloop_submit(mcf->core, tenant->id, &ctx->record, ctx->queued_at);
  if (status != CREDITLOOP_OK) {
    ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "creditloop: submit: %s",
                  creditloop_strerror(status));
    ngx_free(ctx);
    return NGX_HTTP_INTERNAL_SERVER_ERROR;
  }
  ctx->state = CTX_QUEUED;
  tenant->queued++;
  cln->handler = ngx_http_creditloop_cleanup;
  cln->data = ctx;
  ngx_http_set_ctx(r, ctx, ngx_http_creditloop_module);

  ngx_http_creditloop_dispatch(mcf);
  if (ctx->state == CTX_DISPATCHED) {
    /* Room at once: go on without waiting for the posted event. */
    if (r->connection->write->posted) {
      ngx_delete_posted_event(r->connection->write);
    }
    r->write_event_handler = ngx_http_core_run_phases;
    return NGX_DECLINED;
  }
  if (tenant->queue_timeout != 0) {
    ctx->timeout.handler = ngx_http_creditloop_timeout_handler;
    ctx->timeout.data = ctx;
    ctx->timeout.log = r->connection->log;
    ngx_add_timer(&ctx->timeout, tenant->queue_timeout);
  }
  /* Waiting: a client that goes away is noticed (ngx_http_test_reading finalizes the request,
   * whose cleanup withdraws it). */
  r->read_event_handler = ngx_http_test_reading;
  r->write_event_handler = ngx_http_request_empty_handler;
  return NGX_AGAIN;
}

/* ---- variables ---------------------------------------------------------------------------- */

static ngx_int_t ngx_http_creditloop_variable(ngx_http_request_t *r, ngx_http_variable_value_t *v,
                                              uintptr_t data) {
  ngx_http_creditloop_ctx_t *ctx = ngx_http_creditloop_get_ctx(r->main);
  u_char *p;
  if (ctx == NULL || ctx->state == CTX_QUEUED || ctx->state == CTX_REFUSED) {
    v->not_found = 1;
    return NGX_OK;
  }
  p = ngx_pnalloc(r->pool, 32);
  if (p == NULL) return NGX_ERROR;
  switch (data) {
    case 0: /* class */
      v->len = ngx_sprintf(p, "P%d", ctx->out_class + 1) - p;
      break;
    case 1: /* wait, ms */
      v->len = ngx_sprintf(p, "%.3f", (double)(ctx->dispatched_at - ctx->queued_at) / 1e6) - p;
      break;
    default: /* cost, credits; known once the response is */
      if (ctx->request == NULL) {
        v->not_found = 1;
        return NGX_OK;
      }
      v->len = ngx_sprintf(p, "%.4f", ngx_http_creditloop_cost(ctx, 1)) - p;
      break;
  }
  v->data = p;
  v->valid = 1;
  v->no_cacheable = 1;
  v->not_found = 0;
  return NGX_OK;
}

static ngx_http_variable_t ngx_http_creditloop_vars[] = {
    {ngx_string("creditloop_class"), NULL, ngx_http_creditloop_variable, 0,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("creditloop_wait_ms"), NULL, ngx_http_creditloop_variable, 1,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("creditloop_cost"), NULL, ngx_http_creditloop_variable, 2,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    ngx_http_null_variable};

static ngx_int_t ngx_http_creditloop_add_variables(ngx_conf_t *cf) {
  ngx_http_variable_t *var, *v;
  for (v = ngx_http_creditloop_vars; v->name.len; v++) {
    var = ngx_http_add_variable(cf, &v->name, v->flags);
    if (var == NULL) return NGX_ERROR;
    var->get_handler = v->get_handler;
    var->data = v->data;
  }
  return NGX_OK;
}

/* ---- metrics ------------------------------------------------------------------------------ */

static u_char *ngx_http_creditloop_class_label(u_char *p, int c) {
  return ngx_sprintf(p, "P%d", c + 1);
}

static ngx_int_t ngx_http_creditloop_status_handler(ngx_http_request_t *r) {
  ngx_http_creditloop_main_conf_t *mcf =
      ngx_http_get_module_main_conf(r, ngx_http_creditloop_module);
  ngx_http_creditloop_tenant_t *t;
  ngx_uint_t i;
  int c;
  size_t size;
  ngx_buf_t *b;
  ngx_chain_t out;
  ngx_int_t rc;
  int64_t now = ngx_http_creditloop_now();
  creditloop_participant_snapshot s;

  if (r->method != NGX_HTTP_GET && r->method != NGX_HTTP_HEAD) return NGX_HTTP_NOT_ALLOWED;
  rc = ngx_http_discard_request_body(r);
  if (rc != NGX_OK) return rc;
  if (mcf->core == NULL) return NGX_HTTP_NOT_FOUND;

  t = mcf->tenants.elts;
  size = 4096 + mcf->tenants.nelts * (size_t)(mcf->classes + 2) * 6 * 160;
  b = ngx_create_temp_buf(r->pool, size);
  if (b == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_tenant_requests_total Requests dispatched, by the class "
                        "they went out under.\n# TYPE creditloop_tenant_requests_total counter\n");
  {
    /* Every worker of this configuration together, from the zone: a worker that exited keeps
     * its counts there until a reload. */
    ngx_uint_t w;
    for (i = 0; i < mcf->tenants.nelts; ++i) {
      for (c = 0; c <= mcf->classes; ++c) {
        uint64_t sum = 0;
        for (w = 0; w < NGX_HTTP_CREDITLOOP_MAX_WORKERS; ++w) {
          ngx_http_creditloop_entry_t *e = ngx_http_creditloop_entry(mcf, w);
          /* Acquire: pairs with the release store of the entry's stamp (init_process). */
          if (__atomic_load_n(&e->stamp_ms, __ATOMIC_ACQUIRE) == 0) continue;
          if (__atomic_load_n(&e->generation, __ATOMIC_RELAXED) != mcf->generation) continue;
          sum += __atomic_load_n(
              &e->demand[mcf->tenants.nelts + i * (size_t)(mcf->classes + 1) + (size_t)c],
              __ATOMIC_RELAXED);
        }
        b->last = ngx_sprintf(b->last,
                              "creditloop_tenant_requests_total{tenant=\"%V\",class=\"", &t[i].name);
        b->last = ngx_http_creditloop_class_label(b->last, c);
        b->last = ngx_sprintf(b->last, "\"} %uL\n", sum);
      }
    }
  }
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_tenant_queue_depth Requests queued now.\n"
                        "# TYPE creditloop_tenant_queue_depth gauge\n");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    b->last = ngx_sprintf(b->last, "creditloop_tenant_queue_depth{tenant=\"%V\"} %ui\n",
                          &t[i].name, t[i].queued);
  }
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_tenant_balance_credits Bucket balance per class.\n"
                        "# TYPE creditloop_tenant_balance_credits gauge\n");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    if (creditloop_snapshot(mcf->core, t[i].id, now, &s) != CREDITLOOP_OK) continue;
    for (c = 0; c < mcf->classes; ++c) {
      if (!(s.has_class & (1u << c))) continue;
      b->last = ngx_sprintf(b->last, "creditloop_tenant_balance_credits{tenant=\"%V\",class=\"",
                            &t[i].name);
      b->last = ngx_http_creditloop_class_label(b->last, c);
      b->last = ngx_sprintf(b->last, "\"} %.3f\n", (double)s.balance_nano[c] / 1e9);
    }
  }
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_tenant_cost_charged_credits_total Cost charged back.\n"
                        "# TYPE creditloop_tenant_cost_charged_credits_total counter\n");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    if (creditloop_snapshot(mcf->core, t[i].id, now, &s) != CREDITLOOP_OK) continue;
    b->last = ngx_sprintf(b->last,
                          "creditloop_tenant_cost_charged_credits_total{tenant=\"%V\"} %.3f\n",
                          &t[i].name, (double)s.cost_charged_nano / 1e9);
  }
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_nginx_refused_total Requests answered 503 by the "
                        "queue limit or the queue timeout.\n"
                        "# TYPE creditloop_nginx_refused_total counter\n");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    b->last = ngx_sprintf(b->last,
                          "creditloop_nginx_refused_total{tenant=\"%V\",reason=\"queue_limit\"} "
                          "%uL\ncreditloop_nginx_refused_total{tenant=\"%V\",reason=\"queue_"
                          "timeout\"} %uL\n",
                          &t[i].name, t[i].refused_limit, &t[i].name, t[i].refused_timeout);
  }
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_server_requests_cancelled_total Requests whose client "
                        "went away while they were queued.\n"
                        "# TYPE creditloop_server_requests_cancelled_total counter\n");
  {
    uint64_t withdrawn = 0;
    for (i = 0; i < mcf->tenants.nelts; ++i) withdrawn += t[i].withdrawn;
    b->last = ngx_sprintf(b->last, "creditloop_server_requests_cancelled_total %uL\n", withdrawn);
  }
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_loop_passes_total Turns begun, by class.\n"
                        "# TYPE creditloop_loop_passes_total counter\n");
  for (c = 0; c <= mcf->classes; ++c) {
    b->last = ngx_sprintf(b->last, "creditloop_loop_passes_total{class=\"");
    b->last = ngx_http_creditloop_class_label(b->last, c);
    b->last = ngx_sprintf(b->last, "\"} %uL\n", creditloop_passes(mcf->core, c));
  }
  b->last = ngx_sprintf(b->last,
                        "# HELP creditloop_loop_in_flight Requests dispatched and not finished.\n"
                        "# TYPE creditloop_loop_in_flight gauge\ncreditloop_loop_in_flight %ui\n"
                        "# HELP creditloop_server_unauthorized_total Requests answered 401: no "
                        "tenant.\n# TYPE creditloop_server_unauthorized_total counter\n"
                        "creditloop_server_unauthorized_total{listener=\"tenants\"} %uL\n",
                        mcf->in_flight, mcf->unauthorized);

  r->headers_out.status = NGX_HTTP_OK;
  r->headers_out.content_length_n = b->last - b->pos;
  ngx_str_set(&r->headers_out.content_type, "text/plain; version=0.0.4");
  r->headers_out.content_type_len = r->headers_out.content_type.len;
  rc = ngx_http_send_header(r);
  if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) return rc;
  b->last_buf = (r == r->main) ? 1 : 0;
  b->last_in_chain = 1;
  out.buf = b;
  out.next = NULL;
  return ngx_http_output_filter(r, &out);
}

static char *ngx_http_creditloop_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf) {
  ngx_http_core_loc_conf_t *clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
  (void)cmd;
  (void)conf;
  clcf->handler = ngx_http_creditloop_status_handler;
  return NGX_CONF_OK;
}

static ngx_int_t ngx_http_creditloop_log_handler(ngx_http_request_t *r) {
  ngx_http_creditloop_ctx_t *ctx = ngx_http_creditloop_get_ctx(r);
  if (r == r->main && ctx != NULL && ctx->state == CTX_DISPATCHED) {
    (void)ngx_http_creditloop_cost(ctx, 1);
  }
  return NGX_OK;
}

static ngx_int_t ngx_http_creditloop_init(ngx_conf_t *cf) {
  ngx_http_core_main_conf_t *cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
  ngx_http_handler_pt *h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
  if (h == NULL) return NGX_ERROR;
  *h = ngx_http_creditloop_handler;
  h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
  if (h == NULL) return NGX_ERROR;
  *h = ngx_http_creditloop_log_handler;
  return NGX_OK;
}
