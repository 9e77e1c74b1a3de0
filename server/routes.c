/* routes.c — which handler a method and path reach, and the handlers that answer at
 * once (health, indexes, index info, metrics, the OpenAPI document). Search and
 * document requests are parsed here and handed to the index's batcher or writer.
 *
 *   GET    /health                    liveness (open even with an API key)
 *   GET    /indexes                   the served indexes
 *   GET    /indexes/{name}            chimera_index_info fields + the served generation
 *   POST   /indexes/{name}/search     batch.c
 *   POST   /indexes/{name}/documents  add      \
 *   PUT    /indexes/{name}/documents  update    > writer.c
 *   DELETE /indexes/{name}/documents  delete   /
 *   GET    /metrics                   Prometheus text
 *   GET    /openapi.json              the API's description (server/openapi.json)
 * A known path with another method is 405 (with Allow), an unknown path 404, and a body
 * that declares a content type other than JSON 415. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "server.h"

srv_index *srv_index_find(srv_server *srv, const char *name, size_t len)
{
    for (int i = 0; i < srv->n_indexes; i++)
        if (strlen(srv->indexes[i]->name) == len && memcmp(srv->indexes[i]->name, name, len) == 0)
            return srv->indexes[i];
    return NULL;
}

typedef struct route {
    srv_endpoint ep;
    const char *name;  /* /indexes/{name}/...: points into the url */
    size_t name_len;
    const char *allow; /* the methods the path takes */
} route;

/* Splits the url into a route; ep SRV_EP_OTHER for an unknown path. */
static route parse_path(const char *url)
{
    route r = {SRV_EP_OTHER, NULL, 0, NULL};
    size_t n = strlen(url);
    while (n > 1 && url[n - 1] == '/') n--; /* /indexes/ is /indexes */
    if (n == 7 && memcmp(url, "/health", 7) == 0) return (route){SRV_EP_HEALTH, NULL, 0, "GET"};
    if (n == 8 && memcmp(url, "/metrics", 8) == 0) return (route){SRV_EP_METRICS, NULL, 0, "GET"};
    if (n == 13 && memcmp(url, "/openapi.json", 13) == 0) return (route){SRV_EP_OPENAPI, NULL, 0, "GET"};
    if (n == 8 && memcmp(url, "/indexes", 8) == 0) return (route){SRV_EP_INDEXES, NULL, 0, "GET"};
    if (n > 9 && memcmp(url, "/indexes/", 9) == 0) {
        const char *name = url + 9, *end = url + n;
        const char *slash = memchr(name, '/', (size_t)(end - name));
        size_t len = slash ? (size_t)(slash - name) : (size_t)(end - name);
        if (len == 0) return r;
        r.name = name;
        r.name_len = len;
        if (!slash) {
            r.ep = SRV_EP_INDEX;
            r.allow = "GET";
        } else if ((size_t)(end - slash) == 7 && memcmp(slash, "/search", 7) == 0) {
            r.ep = SRV_EP_SEARCH;
            r.allow = "POST";
        } else if ((size_t)(end - slash) == 10 && memcmp(slash, "/documents", 10) == 0) {
            r.ep = SRV_EP_DOCUMENTS;
            r.allow = "POST, PUT, DELETE";
        }
    }
    return r;
}

srv_endpoint srv_route_endpoint(const char *method, const char *url)
{
    (void)method;
    return parse_path(url).ep;
}

static int method_allowed(const route *r, const char *method)
{
    if (!r->allow) return 0;
    size_t ml = strlen(method);
    for (const char *p = r->allow; (p = strstr(p, method)) != NULL; p += ml)
        if ((p == r->allow || p[-1] == ' ') && (p[ml] == '\0' || p[ml] == ','))
            return 1;
    /* HEAD is GET without the body (libmicrohttpd drops it) */
    return strcmp(method, "HEAD") == 0 && strstr(r->allow, "GET") != NULL;
}

static void fail_now(srv_answer *a, int status, const char *code, const char *fmt, const char *arg)
{
    srv_error e = {0};
    srv_fail(&e, status, code, fmt, arg);
    srv_answer_error(a, &e);
}

int64_t srv_index_n_docs(const srv_index *ix)
{
    return ix->remote ? ix->remote->n_docs(ix->remote->user) : chimera_index_n_docs(ix->ix);
}

uint64_t srv_index_generation(const srv_index *ix)
{
    return ix->remote ? ix->remote->generation(ix->remote->user) : chimera_index_generation(ix->ix);
}

static cJSON *index_summary(srv_index *ix)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", ix->name);
    cJSON_AddNumberToObject(o, "dim", ix->dim);
    cJSON_AddNumberToObject(o, "n_docs", (double)srv_index_n_docs(ix));
    cJSON_AddNumberToObject(o, "generation", (double)srv_index_generation(ix));
    if (ix->remote) {
        cJSON_AddStringToObject(o, "kind", ix->remote->kind);
        cJSON_AddNumberToObject(o, "n_shards", ix->remote->n_shards);
    }
    return o;
}

static void handle_health(srv_server *srv, srv_answer *a)
{
    /* a remote index that can serve no more (its shard processes lost) makes the whole
     * service unhealthy, so that whatever watches /health restarts it */
    int lost = 0;
    for (int i = 0; i < srv->n_indexes; i++) {
        const srv_remote *r = srv->indexes[i]->remote;
        if (r && r->healthy && !r->healthy(r->user)) lost = 1;
    }
    cJSON *o = cJSON_CreateObject();
    if (o) {
        cJSON_AddStringToObject(o, "status", lost ? "broken" : atomic_load(&srv->draining) ? "draining" : "ok");
        cJSON_AddStringToObject(o, "version", chimera_version());
        cJSON_AddNumberToObject(o, "indexes", srv->n_indexes);
        cJSON_AddNumberToObject(o, "uptime_seconds", srv_now() - srv->metrics.start_time);
    }
    srv_answer_json(a, lost ? 503 : 200, o);
}

static void handle_indexes(srv_server *srv, srv_answer *a)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "indexes") : NULL;
    for (int i = 0; arr && i < srv->n_indexes; i++) cJSON_AddItemToArray(arr, index_summary(srv->indexes[i]));
    srv_answer_json(a, 200, o);
}

static void handle_info(srv_index *ix, srv_answer *a)
{
    if (ix->remote) { /* its shards are described by the processes that hold them */
        srv_answer_json(a, 200, index_summary(ix));
        return;
    }
    chimera_index_info info;
    chimera_error err = {0};
    chimera_status s = chimera_index_info_read(ix->dir, &info, &err);
    if (s != CHIMERA_OK) {
        fail_now(a, 500, "INDEX_UNREADABLE", "%s", err.msg);
        return;
    }
    cJSON *o = index_summary(ix);
    if (!o) {
        srv_answer_json(a, 200, NULL);
        return;
    }
    cJSON_AddNumberToObject(o, "served_generation", (double)chimera_index_generation(ix->ix));
    cJSON_AddNumberToObject(o, "disk_generation", (double)info.generation);
    char ver[32];
    snprintf(ver, sizeof ver, "%u.%u", info.format_major, info.format_minor);
    cJSON_AddStringToObject(o, "format", ver);
    cJSON_AddStringToObject(o, "library_version", info.library_version);
    cJSON_AddNumberToObject(o, "dim_pad", info.dim_pad);
    cJSON_AddNumberToObject(o, "bits", info.bits);
    cJSON_AddNumberToObject(o, "n_clusters", info.n_clusters);
    cJSON_AddNumberToObject(o, "graph_degree", info.graph_degree);
    cJSON_AddNumberToObject(o, "n_docs_total", (double)info.n_docs);
    cJSON_AddNumberToObject(o, "n_tokens", (double)info.n_tokens);
    cJSON_AddNumberToObject(o, "n_deleted", (double)info.n_deleted);
    cJSON_AddNumberToObject(o, "n_segments", info.n_segments);
    cJSON_AddNumberToObject(o, "n_deletion_lists", info.n_deletion_lists);
    cJSON_AddNumberToObject(o, "appended_docs", (double)info.appended_docs);
    cJSON_AddNumberToObject(o, "appended_tokens", (double)info.appended_tokens);
    cJSON_AddNumberToObject(o, "drift_below", info.drift_below);
    cJSON_AddBoolToObject(o, "recluster_advised", info.recluster_advised);
    const char *rr = chimera_rerank_name(info.rerank);
    cJSON_AddStringToObject(o, "rerank", rr ? rr : "none");
    cJSON *lists = cJSON_AddObjectToObject(o, "posting_lists");
    if (lists) {
        cJSON_AddNumberToObject(lists, "min", (double)info.list_min);
        cJSON_AddNumberToObject(lists, "median", (double)info.list_median);
        cJSON_AddNumberToObject(lists, "max", (double)info.list_max);
        cJSON_AddNumberToObject(lists, "mean", info.list_mean);
        cJSON_AddNumberToObject(lists, "imbalance", info.list_imbalance);
        cJSON_AddNumberToObject(lists, "empty", info.list_empty);
    }
    cJSON *bytes = cJSON_AddObjectToObject(o, "bytes");
    if (bytes) {
        cJSON_AddNumberToObject(bytes, "device", (double)info.bytes_device);
        cJSON_AddNumberToObject(bytes, "host", (double)info.bytes_host);
        cJSON_AddNumberToObject(bytes, "total", (double)info.bytes_total);
        cJSON_AddNumberToObject(bytes, "rerank", (double)info.bytes_rerank);
    }
    cJSON *secs = cJSON_AddArrayToObject(o, "sections");
    for (uint32_t i = 0; secs && i < info.n_sections && i < CHIMERA_INFO_MAX_SECTIONS; i++) {
        cJSON *sc = cJSON_CreateObject();
        if (!sc) break;
        cJSON_AddStringToObject(sc, "name", info.sections[i].name);
        cJSON_AddStringToObject(sc, "dtype", info.sections[i].dtype);
        cJSON_AddNumberToObject(sc, "bytes", (double)info.sections[i].bytes);
        cJSON_AddBoolToObject(sc, "device_resident", info.sections[i].device_resident);
        cJSON_AddItemToArray(secs, sc);
    }
    cJSON *build = cJSON_AddObjectToObject(o, "build");
    if (build) {
        cJSON_AddStringToObject(build, "seed", info.seed);
        cJSON_AddNumberToObject(build, "threads", info.build_threads);
        cJSON_AddNumberToObject(build, "seconds", info.build_seconds);
        cJSON_AddNumberToObject(build, "peak_rss", (double)info.build_peak_rss);
        cJSON_AddNumberToObject(build, "assign_recall", info.assign_recall);
    }
    srv_answer_json(a, 200, o);
}

/* JSON, or no declared type (clients that send none); anything else is refused. */
static int json_content(const char *ctype)
{
    if (!ctype || !*ctype) return 1;
    size_t n = strcspn(ctype, "; \t");
    return n == 16 && strncasecmp(ctype, "application/json", 16) == 0;
}

srv_route_result srv_route(srv_server *srv, const char *method, const char *url,
                           const char *content_type, const char *body, size_t len,
                           srv_answer *now, srv_pending *pending)
{
    route r = parse_path(url);
    memset(now, 0, sizeof *now);
    if (r.ep == SRV_EP_OTHER) {
        fail_now(now, 404, "NOT_FOUND", "no such endpoint: %s (see /openapi.json)", url);
        return SRV_ROUTE_ANSWERED;
    }
    if (!method_allowed(&r, method)) {
        char msg[128];
        snprintf(msg, sizeof msg, "%.16s is not allowed here; allowed: %s", method, r.allow);
        fail_now(now, 405, "METHOD_NOT_ALLOWED", "%s", msg);
        now->allow = r.allow;
        return SRV_ROUTE_ANSWERED;
    }
    srv_index *ix = NULL;
    if (r.name) {
        ix = srv_index_find(srv, r.name, r.name_len);
        if (!ix) {
            char name[SRV_NAME_MAX + 8];
            snprintf(name, sizeof name, "%.*s", (int)(r.name_len < SRV_NAME_MAX ? r.name_len : SRV_NAME_MAX),
                     r.name);
            fail_now(now, 404, "INDEX_NOT_FOUND", "no index named '%s' is served (GET /indexes lists them)",
                     name);
            return SRV_ROUTE_ANSWERED;
        }
    }
    switch (r.ep) {
    case SRV_EP_HEALTH: handle_health(srv, now); return SRV_ROUTE_ANSWERED;
    case SRV_EP_INDEXES: handle_indexes(srv, now); return SRV_ROUTE_ANSWERED;
    case SRV_EP_INDEX: handle_info(ix, now); return SRV_ROUTE_ANSWERED;
    case SRV_EP_METRICS: {
        size_t n = 0;
        now->status = 200;
        now->body = srv_metrics_text(srv, &n);
        now->len = n;
        now->ctype = "text/plain; version=0.0.4; charset=utf-8";
        return SRV_ROUTE_ANSWERED;
    }
    case SRV_EP_OPENAPI:
        now->status = 200;
        now->body = malloc(srv_openapi_json_len + 1);
        if (now->body) {
            memcpy(now->body, srv_openapi_json, srv_openapi_json_len);
            now->body[srv_openapi_json_len] = '\0';
            now->len = srv_openapi_json_len;
        }
        return SRV_ROUTE_ANSWERED;
    default: break;
    }
    /* search and documents: a JSON body, parsed here, answered by the batcher or writer */
    if (!json_content(content_type)) {
        fail_now(now, 415, "UNSUPPORTED_MEDIA_TYPE", "the body must be application/json, not %s",
                 content_type);
        return SRV_ROUTE_ANSWERED;
    }
    srv_error e = {0};
    if (r.ep == SRV_EP_SEARCH) {
        srv_search *s;
        if (srv_parse_search(ix, &srv->cfg, body, len, &s, &e)) {
            srv_answer_error(now, &e);
            srv_error_clear(&e);
            return SRV_ROUTE_ANSWERED;
        }
        s->pending = pending;
        srv_batcher_submit(ix->batcher, s);
        return SRV_ROUTE_WAIT;
    }
    srv_write_kind kind = strcmp(method, "POST") == 0  ? SRV_WRITE_ADD
                          : strcmp(method, "PUT") == 0 ? SRV_WRITE_UPDATE
                                                       : SRV_WRITE_DELETE;
    srv_write *w;
    if (srv_parse_write(ix, &srv->cfg, kind, body, len, &w, &e)) {
        srv_answer_error(now, &e);
        srv_error_clear(&e);
        return SRV_ROUTE_ANSWERED;
    }
    w->pending = pending;
    srv_writer_submit(ix->writer, w);
    return SRV_ROUTE_WAIT;
}
