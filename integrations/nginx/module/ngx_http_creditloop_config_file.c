/*
 * The creditloop_config directive: the JSON configuration file, read by the
 * library as creditloop-server reads it, and its tenants copied into the
 * configuration's pool, sorted by name.
 */


#include "ngx_http_creditloop.h"


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


/* The configuration file is opened here too, for nginx's own words on a path
 * that is no file. */
static ngx_int_t
ngx_http_creditloop_check_file(ngx_conf_t *cf, ngx_str_t *path)
{
    ngx_file_t      file;
    ngx_file_info_t fi;

    ngx_memzero(&file, sizeof(file));
    file.name = *path;
    file.log = cf->log;
    file.fd = ngx_open_file(path->data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (file.fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
            "creditloop_config: cannot open \"%V\"", path);
        return NGX_ERROR;
    }
    if (ngx_fd_info(file.fd, &fi) == NGX_FILE_ERROR || !ngx_is_file(&fi) ||
        ngx_file_size(&fi) > 16 * 1024 * 1024) {
        ngx_close_file(file.fd);
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
            "creditloop_config: \"%V\" is not a regular file of at most 16 MiB",
            path);
        return NGX_ERROR;
    }
    ngx_close_file(file.fd);
    return NGX_OK;
}


/* The library's tenant `i`, copied into the configuration's pool. */
static ngx_int_t
ngx_http_creditloop_add_tenant(
    ngx_conf_t *cf, ngx_http_creditloop_main_conf_t *mcf, size_t i)
{
    creditloop_tenant_config      tc;
    ngx_http_creditloop_tenant_t *t;

    tc.size = sizeof(tc);
    if (creditloop_config_tenant(mcf->config, i, &tc) != CREDITLOOP_OK) {
        return NGX_ERROR;
    }
    t = ngx_array_push(&mcf->tenants);
    if (t == NULL) {
        return NGX_ERROR;
    }
    ngx_memzero(t, sizeof(*t));
    t->name.len = ngx_strlen(tc.name);
    t->name.data =
        ngx_pstrdup(cf->pool, &(ngx_str_t){t->name.len, (u_char *) tc.name});
    t->plan.len = ngx_strlen(tc.plan);
    t->plan.data = ngx_pnalloc(cf->pool, t->plan.len + 1);
    if (t->name.data == NULL || t->plan.data == NULL) {
        return NGX_ERROR;
    }
    ngx_cpystrn(t->plan.data, (u_char *) tc.plan, t->plan.len + 1);
    t->shares = tc.shares;
    t->queue_limit = tc.queue_limit;
    t->queue_timeout = (ngx_msec_t) tc.queue_timeout_ms;
    t->config_index = i;
    return NGX_OK;
}


char *
ngx_http_creditloop_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_creditloop_main_conf_t *mcf = conf;
    ngx_str_t                       *value = cf->args->elts;
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

    if (ngx_http_creditloop_check_file(cf, &mcf->config_path) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

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
        if (ngx_http_creditloop_add_tenant(cf, mcf, i) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
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
