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
#include "creditloop_zone.h"

#define NGX_HTTP_CREDITLOOP_BATCH 64
#define NGX_HTTP_CREDITLOOP_MAX_NAME 64
/* Workers a shared zone has an entry for. */
#define NGX_HTTP_CREDITLOOP_MAX_WORKERS 64
/* An entry not rewritten for this many epochs is a worker gone (a reload's old workers, one
 * that crashed): its demand no longer counts. */
#define NGX_HTTP_CREDITLOOP_TTL_EPOCHS 3

/* One worker's entry in the shared zone (creditloop_zone.h): written by that worker alone, read
 * by every worker, published under a stamp and the configuration's generation. Its values, in
 * order (tenants in sorted order; see the index functions below):
 *   room                          its total demand, for the room's share
 *   demand[tenants]               queued now plus dispatched in the last epoch, per tenant
 *   dispatched[tenants][classes + 1]   requests dispatched, by the class they went out under
 *   per tenant: queued, withdrawn, refused at the limit, refused at the timeout, cost charged
 *               (nano-credits), balance[classes] (nano-credits, as int64)
 *   in flight, unauthorized, passes[classes + 1]
 * The demands and room are rewritten at each epoch; the costs, balances and passes, which only
 * the worker's core knows, at each epoch and at each scrape the worker serves; the others as
 * they change. Values are read without a lock, so a reader may see one epoch's demand of one
 * tenant beside the next epoch's of another, which the rule tolerates as the fleet's store does
 * (each fraction is of one tenant's demands). */
enum {
  ENTRY_QUEUED,
  ENTRY_WITHDRAWN,
  ENTRY_REFUSED_LIMIT,
  ENTRY_REFUSED_TIMEOUT,
  ENTRY_COST_NANO,
  ENTRY_BALANCE_NANO /* [classes] */
};

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
  creditloop_zone_entry *own; /* this worker's entry in the zone, which holds its counts */
  creditloop_core *core;
  ngx_uint_t in_flight;
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

/* ---- the entry's layout ------------------------------------------------------------------- */

#define ENTRY_ROOM 0

static size_t ngx_http_creditloop_entry_demand(ngx_http_creditloop_main_conf_t *mcf, size_t t) {
  (void)mcf;
  return 1 + t;
}

static size_t ngx_http_creditloop_entry_dispatched(ngx_http_creditloop_main_conf_t *mcf, size_t t,
                                                   int c) {
  return 1 + mcf->tenants.nelts + t * (size_t)(mcf->classes + 1) + (size_t)c;
}

/* One of a tenant's ENTRY_* values; ENTRY_BALANCE_NANO + c for class c's balance. */
static size_t ngx_http_creditloop_entry_tenant(ngx_http_creditloop_main_conf_t *mcf, size_t t,
                                               size_t what) {
  return 1 + mcf->tenants.nelts * (size_t)(mcf->classes + 2) +
         t * (ENTRY_BALANCE_NANO + (size_t)mcf->classes) + what;
}

/* The worker-wide values: 0 in flight, 1 unauthorized, 2 + c class c's passes. */
static size_t ngx_http_creditloop_entry_worker(ngx_http_creditloop_main_conf_t *mcf, size_t what) {
  return ngx_http_creditloop_entry_tenant(mcf, mcf->tenants.nelts, 0) + what;
}

#define ENTRY_IN_FLIGHT 0
#define ENTRY_UNAUTHORIZED 1
#define ENTRY_PASSES 2

static size_t ngx_http_creditloop_entry_size(ngx_http_creditloop_main_conf_t *mcf) {
  return creditloop_zone_entry_size(
      ngx_http_creditloop_entry_worker(mcf, ENTRY_PASSES + (size_t)mcf->classes + 1));
}

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
  size_t entry = ngx_http_creditloop_entry_size(mcf);
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
  creditloop_zone_clear(mcf->entries, entry * NGX_HTTP_CREDITLOOP_MAX_WORKERS);
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
    size_t entry = ngx_http_creditloop_entry_size(mcf);
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

static creditloop_zone_entry *ngx_http_creditloop_entry(ngx_http_creditloop_main_conf_t *mcf,
                                                        ngx_uint_t worker) {
  return (creditloop_zone_entry *)(mcf->entries + worker * mcf->entry_size);
}

/* This worker's gauges in its entry, as they change; read by the metrics of every worker. */
static void ngx_http_creditloop_queued(ngx_http_creditloop_main_conf_t *mcf,
                                       ngx_http_creditloop_tenant_t *t, ngx_int_t change) {
  t->queued += change;
  creditloop_zone_store(
      mcf->own,
      ngx_http_creditloop_entry_tenant(
          mcf, (size_t)(t - (ngx_http_creditloop_tenant_t *)mcf->tenants.elts), ENTRY_QUEUED),
      t->queued);
}

static void ngx_http_creditloop_in_flight(ngx_http_creditloop_main_conf_t *mcf,
                                          ngx_int_t change) {
  mcf->in_flight += change;
  creditloop_zone_store(mcf->own, ngx_http_creditloop_entry_worker(mcf, ENTRY_IN_FLIGHT),
                        mcf->in_flight);
}

/* One more of a tenant's ENTRY_* counters: the entry is the counter's only home, so a worker
 * that nginx starts again in a crashed one's place counts on from where that one stopped. */
static void ngx_http_creditloop_count(ngx_http_creditloop_main_conf_t *mcf,
                                      ngx_http_creditloop_tenant_t *t, size_t what) {
  creditloop_zone_add(
      mcf->own,
      ngx_http_creditloop_entry_tenant(
          mcf, (size_t)(t - (ngx_http_creditloop_tenant_t *)mcf->tenants.elts), what),
      1);
}

/* What this worker's core alone knows, into its entry: each tenant's cost charged and balances,
 * and the passes. At each epoch, and for the worker's own at a scrape it serves. */
static void ngx_http_creditloop_store_core(ngx_http_creditloop_main_conf_t *mcf, int64_t now) {
  ngx_http_creditloop_tenant_t *t = mcf->tenants.elts;
  creditloop_participant_snapshot s;
  ngx_uint_t i;
  int c;
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    if (creditloop_snapshot(mcf->core, t[i].id, now, &s) != CREDITLOOP_OK) continue;
    creditloop_zone_store(mcf->own, ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_COST_NANO),
                          (uint64_t)s.cost_charged_nano);
    for (c = 0; c < mcf->classes; ++c) {
      creditloop_zone_store(
          mcf->own, ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_BALANCE_NANO + (size_t)c),
          (uint64_t)s.balance_nano[c]);
    }
  }
  for (c = 0; c <= mcf->classes; ++c) {
    creditloop_zone_store(mcf->own, ngx_http_creditloop_entry_worker(mcf, ENTRY_PASSES + (size_t)c),
                          creditloop_passes(mcf->core, c));
  }
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
  ngx_msec_t now = ngx_current_msec, ttl = mcf->epoch * NGX_HTTP_CREDITLOOP_TTL_EPOCHS;
  ngx_uint_t i, w, live = 0, room_changed;
  uint64_t own_room = 0, all_room = 0;
  int64_t now_ns = ngx_http_creditloop_now();
  uint32_t f;

  for (i = 0; i < mcf->tenants.nelts; ++i) {
    uint64_t d = t[i].queued + t[i].dispatched_epoch;
    t[i].dispatched_epoch = 0;
    own_room += d;
    creditloop_zone_store(mcf->own, ngx_http_creditloop_entry_demand(mcf, i), d);
  }
  creditloop_zone_store(mcf->own, ENTRY_ROOM, own_room);
  ngx_http_creditloop_store_core(mcf, now_ns);
  /* A reader in another worker that sees this stamp sees everything stored before it. */
  creditloop_zone_publish(mcf->own, mcf->generation, now);

  for (i = 0; i < mcf->tenants.nelts; ++i) {
    uint64_t total = 0;
    uint64_t mine = creditloop_zone_load(mcf->own, ngx_http_creditloop_entry_demand(mcf, i));
    live = 0;
    for (w = 0; w < NGX_HTTP_CREDITLOOP_MAX_WORKERS; ++w) {
      creditloop_zone_entry *e = ngx_http_creditloop_entry(mcf, w);
      if (!creditloop_zone_live(e, mcf->generation, now, ttl)) continue;
      live++;
      total += creditloop_zone_load(e, ngx_http_creditloop_entry_demand(mcf, i));
      if (i == 0) all_room += creditloop_zone_load(e, ENTRY_ROOM);
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
    mcf->own = ngx_http_creditloop_entry(mcf, ngx_worker);
    /* A worker started in a crashed one's place has nothing queued or in flight yet. */
    for (i = 0; i < mcf->tenants.nelts; ++i) ngx_http_creditloop_queued(mcf, &t[i], 0);
    ngx_http_creditloop_in_flight(mcf, 0);
    ngx_http_creditloop_store_core(mcf, now);
    /* The entry is live for the metrics from the start, whatever the worker count. */
    creditloop_zone_publish(mcf->own, mcf->generation, ngx_current_msec);
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
      ngx_http_creditloop_queued(mcf, ctx->tenant, -1);
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
      creditloop_zone_add(
          mcf->own,
          ngx_http_creditloop_entry_dispatched(
              mcf, (size_t)(ctx->tenant - (ngx_http_creditloop_tenant_t *)mcf->tenants.elts),
              d->out_class),
          1);
      ngx_http_creditloop_in_flight(mcf, 1);
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
    ngx_http_creditloop_count(mcf, ctx->tenant, ENTRY_WITHDRAWN);
    if (s == CREDITLOOP_OK) {
      ngx_http_creditloop_queued(mcf, ctx->tenant, -1);
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
    ngx_http_creditloop_in_flight(mcf, -1);
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
  ngx_http_creditloop_queued(ctx->mcf, ctx->tenant, -1);
  ngx_http_creditloop_count(ctx->mcf, ctx->tenant, ENTRY_REFUSED_TIMEOUT);
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
    creditloop_zone_add(mcf->own, ngx_http_creditloop_entry_worker(mcf, ENTRY_UNAUTHORIZED), 1);
    return NGX_HTTP_UNAUTHORIZED;
  }
  if (tenant->queue_limit != 0 && tenant->queued >= tenant->queue_limit &&
      mcf->in_flight >= mcf->room) {
    ngx_http_creditloop_count(mcf, tenant, ENTRY_REFUSED_LIMIT);
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
  ngx_http_creditloop_queued(mcf, tenant, 1);
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

/* One value summed over every worker of this configuration, from the zone. A worker that exited
 * keeps its counts there until a reload, and nginx starts a crashed worker's successor on the
 * same entry; the old workers of a reload write the other block. */
static uint64_t ngx_http_creditloop_sum(ngx_http_creditloop_main_conf_t *mcf, size_t value) {
  uint64_t sum = 0;
  ngx_uint_t w;
  for (w = 0; w < NGX_HTTP_CREDITLOOP_MAX_WORKERS; ++w) {
    creditloop_zone_entry *e = ngx_http_creditloop_entry(mcf, w);
    /* Any age: an entry is rewritten at epochs only with several workers. */
    if (!creditloop_zone_live(e, mcf->generation, ngx_current_msec, (uint64_t)-1)) continue;
    sum += creditloop_zone_load(e, value);
  }
  return sum;
}

static u_char *ngx_http_creditloop_help(u_char *p, const char *name, const char *type,
                                        const char *help) {
  return ngx_sprintf(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Every metric answers for the whole nginx, whichever worker serves the scrape: each worker's
 * counts and gauges are summed from the zone. */
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
  uint64_t sum;

  if (r->method != NGX_HTTP_GET && r->method != NGX_HTTP_HEAD) return NGX_HTTP_NOT_ALLOWED;
  rc = ngx_http_discard_request_body(r);
  if (rc != NGX_OK) return rc;
  if (mcf->core == NULL) return NGX_HTTP_NOT_FOUND;
  /* This worker's costs, balances and passes as of now; the others' as of their last epoch. */
  ngx_http_creditloop_store_core(mcf, now);

  t = mcf->tenants.elts;
  size = 4096 + mcf->tenants.nelts * (size_t)(mcf->classes + 2) * 6 * 160;
  b = ngx_create_temp_buf(r->pool, size);
  if (b == NULL) return NGX_HTTP_INTERNAL_SERVER_ERROR;
  b->last = ngx_http_creditloop_help(b->last, "creditloop_tenant_requests_total", "counter",
                                     "Requests dispatched, by the class they went out under.");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    for (c = 0; c <= mcf->classes; ++c) {
      sum = ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_dispatched(mcf, i, c));
      b->last = ngx_sprintf(b->last,
                            "creditloop_tenant_requests_total{tenant=\"%V\",class=\"", &t[i].name);
      b->last = ngx_http_creditloop_class_label(b->last, c);
      b->last = ngx_sprintf(b->last, "\"} %uL\n", sum);
    }
  }
  b->last = ngx_http_creditloop_help(b->last, "creditloop_tenant_queue_depth", "gauge",
                                     "Requests queued now.");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    sum = ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_QUEUED));
    b->last = ngx_sprintf(b->last, "creditloop_tenant_queue_depth{tenant=\"%V\"} %uL\n",
                          &t[i].name, sum);
  }
  /* Summed, not labelled by worker: each worker's bucket holds its share of the tenant's plan, so
   * the sum is the tenant's credit in this nginx, what a user compares with the plan's burst and
   * alerts on, as creditloop-server's one bucket; a worker label would change the series with
   * worker_processes, and every query would sum it away. */
  b->last = ngx_http_creditloop_help(
      b->last, "creditloop_tenant_balance_credits", "gauge",
      "Bucket balance per class, summed over the workers' buckets (each holds its share of the "
      "plan); another worker's as of its last epoch.");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    /* The classes the tenant's plan holds, the same in every worker. */
    if (creditloop_snapshot(mcf->core, t[i].id, now, &s) != CREDITLOOP_OK) continue;
    for (c = 0; c < mcf->classes; ++c) {
      if (!(s.has_class & (1u << c))) continue;
      sum = ngx_http_creditloop_sum(
          mcf, ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_BALANCE_NANO + (size_t)c));
      b->last = ngx_sprintf(b->last, "creditloop_tenant_balance_credits{tenant=\"%V\",class=\"",
                            &t[i].name);
      b->last = ngx_http_creditloop_class_label(b->last, c);
      /* Signed: a balance may be below 0 after a charge-back; the sum wraps as int64 would. */
      b->last = ngx_sprintf(b->last, "\"} %.3f\n", (double)(int64_t)sum / 1e9);
    }
  }
  b->last = ngx_http_creditloop_help(
      b->last, "creditloop_tenant_cost_charged_credits_total", "counter",
      "Cost charged back; another worker's as of its last epoch.");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    sum = ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_COST_NANO));
    b->last = ngx_sprintf(b->last,
                          "creditloop_tenant_cost_charged_credits_total{tenant=\"%V\"} %.3f\n",
                          &t[i].name, (double)sum / 1e9);
  }
  b->last = ngx_http_creditloop_help(
      b->last, "creditloop_nginx_refused_total", "counter",
      "Requests answered 503 by the queue limit or the queue timeout.");
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    b->last = ngx_sprintf(
        b->last,
        "creditloop_nginx_refused_total{tenant=\"%V\",reason=\"queue_limit\"} %uL\n"
        "creditloop_nginx_refused_total{tenant=\"%V\",reason=\"queue_timeout\"} %uL\n",
        &t[i].name,
        ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_REFUSED_LIMIT)),
        &t[i].name,
        ngx_http_creditloop_sum(mcf,
                                ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_REFUSED_TIMEOUT)));
  }
  b->last = ngx_http_creditloop_help(
      b->last, "creditloop_server_requests_cancelled_total", "counter",
      "Requests whose client went away while they were queued.");
  sum = 0;
  for (i = 0; i < mcf->tenants.nelts; ++i) {
    sum += ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_tenant(mcf, i, ENTRY_WITHDRAWN));
  }
  b->last = ngx_sprintf(b->last, "creditloop_server_requests_cancelled_total %uL\n", sum);
  b->last = ngx_http_creditloop_help(b->last, "creditloop_loop_passes_total", "counter",
                                     "Turns begun, by class; another worker's as of its last "
                                     "epoch.");
  for (c = 0; c <= mcf->classes; ++c) {
    sum = ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_worker(mcf, ENTRY_PASSES +
                                                                             (size_t)c));
    b->last = ngx_sprintf(b->last, "creditloop_loop_passes_total{class=\"");
    b->last = ngx_http_creditloop_class_label(b->last, c);
    b->last = ngx_sprintf(b->last, "\"} %uL\n", sum);
  }
  b->last = ngx_http_creditloop_help(b->last, "creditloop_loop_in_flight", "gauge",
                                     "Requests dispatched and not finished.");
  b->last = ngx_sprintf(b->last, "creditloop_loop_in_flight %uL\n",
                        ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_worker(
                                                         mcf, ENTRY_IN_FLIGHT)));
  b->last = ngx_http_creditloop_help(b->last, "creditloop_server_unauthorized_total", "counter",
                                     "Requests answered 401: no tenant.");
  b->last = ngx_sprintf(b->last, "creditloop_server_unauthorized_total{listener=\"tenants\"} %uL\n",
                        ngx_http_creditloop_sum(mcf, ngx_http_creditloop_entry_worker(
                                                         mcf, ENTRY_UNAUTHORIZED)));

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
