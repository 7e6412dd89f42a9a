/*
 * ngx_http_creditloop_module: this file: rooms. A room is a set of slots
 * shared by every worker through its own zone, fixed or learned from the
 * backend's latency (creditloop_slots, creditloop_room, creditloop_room_use),
 * and the workers' eventfds that a freed slot wakes.
 */


#include "ngx_http_creditloop.h"

#include <sys/eventfd.h>


#define NGX_HTTP_CREDITLOOP_MAX_SLOTS 1000000


ngx_http_creditloop_room_t *
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
    if (room->learned) {
        room->learned_words = ngx_slab_alloc(pool, creditloop_learned_bytes());
        if (room->learned_words == NULL) {
            ngx_log_error(NGX_LOG_EMERG, zone->shm.log, 0,
                "creditloop: the zone has no room for the learned room");
            return NGX_ERROR;
        }
        creditloop_learned_start(
            room->learned_words, (uint32_t) room->least, (uint32_t) room->most);
    }
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
ngx_int_t
ngx_http_creditloop_init_room_conf(
    ngx_conf_t *cf, ngx_http_creditloop_room_t *room)
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
ngx_int_t
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


char *
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
char *
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


char *
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
