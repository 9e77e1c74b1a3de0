/* metrics.c — counters of `chimera serve` and their Prometheus text (GET /metrics).
 *
 * Every counter is a relaxed atomic bumped by the thread that sees the event, so
 * counting costs no lock on the request path; /metrics reads them one by one (a scrape
 * may see one request counted in `requests` and not yet in its histogram, which
 * Prometheus tolerates). Series (all prefixed chimera_):
 *   http_requests_total{endpoint}, http_errors_total{endpoint} (status >= 400),
 *   http_responses_total{class="2xx"...}, http_request_duration_seconds{endpoint}
 *   (histogram), http_in_flight, queries_total, queries_per_second (the last 5 whole
 *   seconds), search_batches_total, search_batch_size (histogram of queries per library
 *   call), writes_total, write_errors_total, documents_added_total,
 *   documents_deleted_total, index_generation{index}, index_documents{index},
 *   uptime_seconds. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

static const double lat_le[SRV_LAT_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                               0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const int64_t batch_le[SRV_BATCH_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 256};

static const char *const ep_names[SRV_N_ENDPOINTS] = {
    "health", "indexes", "index", "search", "documents", "metrics", "openapi", "other"};

const char *srv_endpoint_name(srv_endpoint ep)
{
    return (unsigned)ep < SRV_N_ENDPOINTS ? ep_names[ep] : "other";
}

void srv_metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    m->start_time = srv_now();
}

#define INC(x, n) atomic_fetch_add_explicit(&(x), (n), memory_order_relaxed)
#define GET(x) atomic_load_explicit(&(x), memory_order_relaxed)

void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status, double seconds)
{
    if ((unsigned)ep >= SRV_N_ENDPOINTS) ep = SRV_EP_OTHER;
    INC(m->requests[ep], 1);
    if (status >= 400 || status == 0) INC(m->errors[ep], 1);
    if (status >= 100 && status < 600) INC(m->status_class[status / 100], 1);
    int b = 0;
    while (b < SRV_LAT_BUCKETS && seconds > lat_le[b]) b++;
    INC(m->lat_bucket[ep][b], 1);
    INC(m->lat_sum_us[ep], (uint64_t)(seconds * 1e6));
}

void srv_metrics_batch(srv_metrics *m, int64_t n_queries)
{
    INC(m->batches, 1);
    INC(m->queries, (uint64_t)n_queries);
    INC(m->batch_queries_sum, (uint64_t)n_queries);
    int b = 0;
    while (b < SRV_BATCH_BUCKETS && n_queries > batch_le[b]) b++;
    INC(m->batch_bucket[b], 1);
    /* per-second ring: slot = second mod 8, reset when a new second claims it */
    int64_t sec = (int64_t)srv_now();
    int slot = (int)(sec & 7);
    int64_t was = GET(m->qps_ring_sec[slot]);
    if (was != sec && atomic_compare_exchange_strong(&m->qps_ring_sec[slot], &was, sec))
        atomic_store(&m->qps_ring[slot], 0);
    INC(m->qps_ring[slot], (uint64_t)n_queries);
}

/* ---- text ------------------------------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* Index names are [A-Za-z0-9_.-] (main.c checks), so they need no escaping here. */
char *srv_metrics_text(srv_server *srv, size_t *len)
{
    srv_metrics *m = &srv->metrics;
    buf b = {malloc(8192), 0, 8192, 0};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    put(&b, "# HELP chimera_http_requests_total HTTP requests answered, by endpoint.\n"
            "# TYPE chimera_http_requests_total counter\n");
    for (int e = 0; e < SRV_N_ENDPOINTS; e++)
        put(&b, "chimera_http_requests_total{endpoint=\"%s\"} %llu\n", ep_names[e],
            (unsigned long long)GET(m->requests[e]));
    put(&b, "# HELP chimera_http_errors_total HTTP requests answered with a status >= 400 (or not "
            "answered), by endpoint.\n# TYPE chimera_http_errors_total counter\n");
    for (int e = 0; e < SRV_N_ENDPOINTS; e++)
        put(&b, "chimera_http_errors_total{endpoint=\"%s\"} %llu\n", ep_names[e],
            (unsigned long long)GET(m->errors[e]));
    put(&b, "# HELP chimera_http_responses_total HTTP responses by status class.\n"
            "# TYPE chimera_http_responses_total counter\n");
    for (int c = 1; c <= 5; c++)
        put(&b, "chimera_http_responses_total{class=\"%dxx\"} %llu\n", c,
            (unsigned long long)GET(m->status_class[c]));
    put(&b, "# HELP chimera_http_request_duration_seconds Time from the request's headers to "
            "its completion, by endpoint.\n# TYPE chimera_http_request_duration_seconds histogram\n");
    for (int e = 0; e < SRV_N_ENDPOINTS; e++) {
        uint64_t acc = 0;
        for (int i = 0; i <= SRV_LAT_BUCKETS; i++) {
            acc += GET(m->lat_bucket[e][i]);
            if (i < SRV_LAT_BUCKETS)
                put(&b, "chimera_http_request_duration_seconds_bucket{endpoint=\"%s\",le=\"%g\"} %llu\n",
                    ep_names[e], lat_le[i], (unsigned long long)acc);
            else
                put(&b, "chimera_http_request_duration_seconds_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n",
                    ep_names[e], (unsigned long long)acc);
        }
        put(&b, "chimera_http_request_duration_seconds_sum{endpoint=\"%s\"} %.6f\n", ep_names[e],
            1e-6 * (double)GET(m->lat_sum_us[e]));
        put(&b, "chimera_http_request_duration_seconds_count{endpoint=\"%s\"} %llu\n", ep_names[e],
            (unsigned long long)acc);
    }
    put(&b, "# HELP chimera_http_in_flight Requests received and not yet completed.\n"
            "# TYPE chimera_http_in_flight gauge\nchimera_http_in_flight %lld\n",
        (long long)GET(m->in_flight));
    put(&b, "# HELP chimera_queries_total Queries searched.\n# TYPE chimera_queries_total counter\n"
            "chimera_queries_total %llu\n", (unsigned long long)GET(m->queries));
    int64_t now = (int64_t)srv_now();
    uint64_t recent = 0;
    for (int s = 1; s <= 5; s++) {
        int slot = (int)((now - s) & 7);
        if (GET(m->qps_ring_sec[slot]) == now - s) recent += GET(m->qps_ring[slot]);
    }
    put(&b, "# HELP chimera_queries_per_second Queries searched per second over the last 5 whole "
            "seconds.\n# TYPE chimera_queries_per_second gauge\nchimera_queries_per_second %.1f\n",
        (double)recent / 5.0);
    put(&b, "# HELP chimera_search_batches_total Batched library calls.\n"
            "# TYPE chimera_search_batches_total counter\nchimera_search_batches_total %llu\n",
        (unsigned long long)GET(m->batches));
    put(&b, "# HELP chimera_search_batch_size Queries per batched library call.\n"
            "# TYPE chimera_search_batch_size histogram\n");
    uint64_t acc = 0;
    for (int i = 0; i <= SRV_BATCH_BUCKETS; i++) {
        acc += GET(m->batch_bucket[i]);
        if (i < SRV_BATCH_BUCKETS)
            put(&b, "chimera_search_batch_size_bucket{le=\"%lld\"} %llu\n", (long long)batch_le[i],
                (unsigned long long)acc);
        else
            put(&b, "chimera_search_batch_size_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)acc);
    }
    put(&b, "chimera_search_batch_size_sum %llu\nchimera_search_batch_size_count %llu\n",
        (unsigned long long)GET(m->batch_queries_sum), (unsigned long long)acc);
    put(&b, "# HELP chimera_writes_total Committed writes (add, update, delete requests).\n"
            "# TYPE chimera_writes_total counter\nchimera_writes_total %llu\n",
        (unsigned long long)GET(m->writes));
    put(&b, "# HELP chimera_write_errors_total Write requests that failed.\n"
            "# TYPE chimera_write_errors_total counter\nchimera_write_errors_total %llu\n",
        (unsigned long long)GET(m->write_errors));
    put(&b, "# HELP chimera_documents_added_total Documents added (add and update).\n"
            "# TYPE chimera_documents_added_total counter\nchimera_documents_added_total %llu\n",
        (unsigned long long)GET(m->docs_added));
    put(&b, "# HELP chimera_documents_deleted_total Documents deleted (delete and update).\n"
            "# TYPE chimera_documents_deleted_total counter\nchimera_documents_deleted_total %llu\n",
        (unsigned long long)GET(m->docs_deleted));
    put(&b, "# HELP chimera_index_generation The generation the served handle sees.\n"
            "# TYPE chimera_index_generation gauge\n");
    for (int i = 0; i < srv->n_indexes; i++)
        put(&b, "chimera_index_generation{index=\"%s\"} %llu\n", srv->indexes[i]->name,
            (unsigned long long)srv_index_generation(srv->indexes[i]));
    put(&b, "# HELP chimera_index_documents Documents a search can return.\n"
            "# TYPE chimera_index_documents gauge\n");
    for (int i = 0; i < srv->n_indexes; i++)
        put(&b, "chimera_index_documents{index=\"%s\"} %lld\n", srv->indexes[i]->name,
            (long long)srv_index_n_docs(srv->indexes[i]));
    put(&b, "# HELP chimera_uptime_seconds Seconds since the server started.\n"
            "# TYPE chimera_uptime_seconds gauge\nchimera_uptime_seconds %.1f\n",
        srv_now() - m->start_time);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
