/* server.h — the pieces of `chimera serve` and how they meet.
 *
 * The server is a front end: it includes chimera.h and nothing else from the library
 * (tests/check_layering.sh), and its own headers. One process serves several indexes,
 * each under a name. Per index it owns:
 *   - one chimera_index handle that every search uses (the library lets any number of
 *     threads search one handle; a refresh moves it to a new generation while running
 *     searches finish on theirs), refreshed by the writer after each commit;
 *   - a batcher (batch.c): search requests from the HTTP threads are queued, and one
 *     thread runs what is queued as one batched library call (throughput mode);
 *   - a writer (writer.c): add, update and delete requests are queued, and one thread
 *     commits them through the library (which takes the index's writer lock), so
 *     writes are serialised and never block a search.
 * HTTP (http.c) runs on libmicrohttpd's thread pool with epoll. A request that must
 * wait for the batcher or the writer suspends its connection instead of blocking a pool
 * thread; the batcher or writer fills in the answer and resumes it.
 *
 * Prefixes: srv_ for every non-static symbol of server/. */
#ifndef CHIMERA_SERVER_H
#define CHIMERA_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "chimera.h"

#define SRV_MAX_INDEXES 64
#define SRV_NAME_MAX 64

/* ---- errors: every error answer is {"code", "message"[, "details"]} ------------------ */

/* An HTTP error: status, a stable upper-case code and a message. details (may be NULL)
 * is a cJSON object owned by the error once set (srv_error_set takes it). */
typedef struct srv_error {
    int status;          /* 0: no error */
    const char *code;    /* static: "BAD_JSON", "INDEX_NOT_FOUND", ... */
    char message[512];
    void *details;       /* cJSON * or NULL */
} srv_error;

/* Fills e (status, code, printf message) and returns -1, so parsers can `return
 * srv_fail(...)`. Keeps the first error: a later call on a filled e changes nothing. */
int srv_fail(srv_error *e, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Attaches details (a cJSON object) to a filled error; frees them if e has one. */
void srv_error_details(srv_error *e, void *details);
void srv_error_clear(srv_error *e);
/* The JSON text of e ({"code","message","details"?}), malloc'd; NULL when out of memory. */
char *srv_error_json(const srv_error *e);
/* The status of a library error: 422 for the caller's data (dimension, value, empty,
 * invalid argument), 409 for a conflict, 503 for busy, 500 for the rest. */
int srv_status_of(chimera_status s);

/* ---- configuration ----------------------------------------------------------------- */

typedef struct srv_config {
    const char *host;          /* "127.0.0.1" */
    uint16_t port;             /* 8080; 0: any free port (printed at start) */
    int http_threads;          /* libmicrohttpd pool size */
    int search_threads;        /* the library's threads per batched search (0: all CPUs) */
    size_t max_body;           /* bytes */
    size_t max_parse_memory;   /* bytes: what the JSON trees of the bodies parsed at once may take */
    uint32_t max_k;            /* 1000 */
    int64_t max_queries;       /* per request: 1024 */
    uint32_t max_query_tokens; /* per query: 1024 */
    int64_t max_batch;         /* queries per batched call: 1024 */
    int batch_window_us;       /* how long the batcher waits for company: 1000 */
    int timeout_s;             /* idle connection timeout: 10 */
    char api_key[256];         /* "" : no key required */
    size_t api_key_len;
    int quiet;                 /* 1: no per-request log line */
} srv_config;

/* ---- metrics ----------------------------------------------------------------------- */

/* The endpoints metrics are kept for (label values of the Prometheus series). */
typedef enum srv_endpoint {
    SRV_EP_HEALTH,
    SRV_EP_INDEXES,
    SRV_EP_INDEX,
    SRV_EP_SEARCH,
    SRV_EP_DOCUMENTS,
    SRV_EP_METRICS,
    SRV_EP_OPENAPI,
    SRV_EP_OTHER,
    SRV_N_ENDPOINTS
} srv_endpoint;

const char *srv_endpoint_name(srv_endpoint ep);

#define SRV_LAT_BUCKETS 14
#define SRV_BATCH_BUCKETS 9

typedef struct srv_metrics {
    _Atomic uint64_t requests[SRV_N_ENDPOINTS];
    _Atomic uint64_t errors[SRV_N_ENDPOINTS];          /* status >= 400 */
    _Atomic uint64_t lat_bucket[SRV_N_ENDPOINTS][SRV_LAT_BUCKETS + 1]; /* last: +Inf */
    _Atomic uint64_t lat_sum_us[SRV_N_ENDPOINTS];
    _Atomic uint64_t status_class[6];                  /* 1xx .. 5xx by first digit */
    _Atomic uint64_t queries;                          /* query vectors sets searched */
    _Atomic uint64_t batches;
    _Atomic uint64_t batch_bucket[SRV_BATCH_BUCKETS + 1];
    _Atomic uint64_t batch_queries_sum;
    _Atomic uint64_t writes, write_errors, docs_added, docs_deleted;
    _Atomic int64_t in_flight;
    /* queries per second over the last few seconds: a ring of per-second counts */
    _Atomic uint64_t qps_ring[8];
    _Atomic int64_t qps_ring_sec[8];
    double start_time;
} srv_metrics;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status, double seconds);
void srv_metrics_batch(srv_metrics *m, int64_t n_queries);

/* ---- indexes, batcher, writer --------------------------------------------------------- */

typedef struct srv_batcher srv_batcher;
typedef struct srv_writer srv_writer;
typedef struct srv_write srv_write;
typedef struct srv_server srv_server;

/* An index served through someone else's calls instead of a local chimera_index: the
 * shards of chimera-mpi serve, on other processes. search is chimera_index_search's
 * contract; commit makes one write (never a metadata filter or metadata records, which
 * request.c refuses for a remote index) durable and visible before it returns; the
 * others describe what is served. Called from the batcher and writer threads. */
typedef struct srv_remote {
    void *user;
    chimera_status (*search)(void *user, const chimera_queries *q, uint32_t k,
                             const chimera_search_params *p, const chimera_search_opts *so,
                             int64_t *ids, float *scores, chimera_search_profile *prof,
                             chimera_error *err);
    chimera_status (*commit)(void *user, const srv_write *w, chimera_update_report *rep,
                             chimera_error *err);
    int64_t (*n_docs)(void *user);
    uint64_t (*generation)(void *user);
    int (*healthy)(void *user);  /* 0: it can serve no more (GET /health answers 503) */
    const char *kind;            /* "sharded": what GET /indexes/{name} says it is */
    int n_shards;
} srv_remote;

typedef struct srv_index {
    char name[SRV_NAME_MAX];
    char *dir;
    chimera_index *ix;           /* NULL when remote */
    const srv_remote *remote;    /* NULL: a local index */
    uint32_t dim;
    srv_batcher *batcher;
    srv_writer *writer;
    srv_server *srv;
} srv_index;

/* What is served, local or remote. */
int64_t srv_index_n_docs(const srv_index *ix);
uint64_t srv_index_generation(const srv_index *ix);

struct srv_server {
    const char *prog;            /* in messages: "chimera serve" */
    srv_config cfg;
    srv_index *indexes[SRV_MAX_INDEXES];
    int n_indexes;
    srv_metrics metrics;
    struct MHD_Daemon *daemon;
    atomic_int draining;         /* 1 after SIGTERM: new requests get 503 */
    atomic_size_t parse_bytes;   /* reserved by the parses in flight (request.c) */
    pthread_mutex_t log_lock;
};

srv_index *srv_index_find(srv_server *srv, const char *name, size_t len);

/* ---- a request in flight --------------------------------------------------------------- */

/* The answer a request gets: status and a JSON body (malloc'd), filled by a handler, or
 * later by the batcher or the writer for a suspended request. */
typedef struct srv_answer {
    int status;
    char *body;
    size_t len;
    const char *ctype;   /* static; NULL: application/json */
    const char *allow;   /* static; the Allow header of a 405 */
    int early;           /* answered before the body was read (the connection closes) */
    int lasting;         /* a 503 that will not pass (SHARDS_LOST): no Retry-After */
} srv_answer;

/* Sets a's body to the cJSON value's text (and frees the value) or to e's error. */
void srv_answer_json(srv_answer *a, int status, void *json);
void srv_answer_error(srv_answer *a, const srv_error *e);

/* A request waiting on the batcher or the writer: `done` is called once, from that
 * thread, after `answer` is filled in (http.c resumes the connection). */
typedef struct srv_pending {
    srv_answer answer;
    void (*done)(struct srv_pending *p);
} srv_pending;

/* ---- search (request.c parses, batch.c runs) -------------------------------------------- */

typedef struct srv_search {
    srv_pending *pending;        /* answered through this */
    float *tokens;               /* all query tokens back to back */
    int64_t *qlens;              /* [nq] */
    int64_t nq;
    int64_t n_tokens;
    uint32_t k;
    chimera_search_params params;
    chimera_filter **filters;    /* [nq] entries (NULL: none); the same filter may repeat */
    int n_owned_filters;
    chimera_filter **owned;      /* the distinct filters to free */
    int profile;
    struct srv_search *next;     /* batcher queue */
    double t_enqueued;
} srv_search;

/* Parses a search body for index `ix` into *out (allocated). On error fills e. */
int srv_parse_search(srv_index *ix, const srv_config *cfg, const char *body, size_t len,
                     srv_search **out, srv_error *e);
void srv_search_free(srv_search *s);

int srv_batcher_start(srv_index *ix, const srv_config *cfg, srv_metrics *m, srv_batcher **out,
                      char *msg, size_t msg_len);
/* Queues s (ownership passes to the batcher, which frees it after answering). */
void srv_batcher_submit(srv_batcher *b, srv_search *s);
/* Finishes what is queued and stops the thread; requests submitted after it are
 * answered 503 at once. srv_batcher_free (after the HTTP daemon is gone) frees b. */
void srv_batcher_stop(srv_batcher *b);
void srv_batcher_free(srv_batcher *b);

/* ---- writes (request.c parses, writer.c commits) ---------------------------------------- */

typedef enum srv_write_kind { SRV_WRITE_ADD, SRV_WRITE_UPDATE, SRV_WRITE_DELETE } srv_write_kind;

struct srv_write {
    srv_pending *pending;
    srv_write_kind kind;
    /* add, update: documents */
    float *tokens;               /* [n_tokens, dim] */
    int64_t n_tokens;
    int64_t *doclens;            /* [n_docs] */
    int64_t *ids;                /* [n_docs] (delete: the ids to delete) */
    int64_t n_docs;
    char *metadata_jsonl;        /* NULL or JSON Lines, one record per document */
    /* delete by filter */
    char *filter;
    char **filter_args;
    int n_filter_args;
    int missing_ok;
    struct srv_write *next;
};

int srv_parse_write(srv_index *ix, const srv_config *cfg, srv_write_kind kind, const char *body,
                    size_t len, srv_write **out, srv_error *e);
void srv_write_free(srv_write *w);

int srv_writer_start(srv_index *ix, srv_metrics *m, srv_writer **out, char *msg, size_t msg_len);
void srv_writer_submit(srv_writer *w, srv_write *wr);
void srv_writer_stop(srv_writer *w);   /* as srv_batcher_stop */
void srv_writer_free(srv_writer *w);

/* ---- routes (routes.c) and HTTP (http.c) ------------------------------------------------- */

/* What a route decided: an immediate answer, or that the request now waits (its pending
 * answer will be filled by the batcher or the writer). */
typedef enum srv_route_result { SRV_ROUTE_ANSWERED, SRV_ROUTE_WAIT } srv_route_result;

/* Which endpoint a method and path name (for metrics), before the body arrives. */
srv_endpoint srv_route_endpoint(const char *method, const char *url);

/* Handles one complete request. For SRV_ROUTE_WAIT, *pending has been handed to the
 * batcher or writer, which will call pending->done. */
srv_route_result srv_route(srv_server *srv, const char *method, const char *url,
                           const char *content_type, const char *body, size_t len,
                           srv_answer *now, srv_pending *pending);

/* The Prometheus text of the metrics (malloc'd). */
char *srv_metrics_text(srv_server *srv, size_t *len);

/* The OpenAPI document (openapi.json, compiled in). */
extern const unsigned char srv_openapi_json[];
extern const size_t srv_openapi_json_len;

/* ---- the service (main.c): chimera serve, and chimera-mpi serve on top of it ------------ */

/* Sets srv to the default configuration (its storage is the caller's: static, it is big). */
void srv_init(srv_server *srv);
/* Parses serve options argv[first..]: 0, 1 (an error, printed; exit 1 for an index that
 * failed to open, else 2 in *code), or -1 (--help printed). allow_index = 0 refuses
 * --index (chimera-mpi serve names its one index itself). */
int srv_parse_args(srv_server *srv, int argc, char **argv, int first, int allow_index,
                   double *drain_s, int *code);
/* Blocks SIGTERM and SIGINT (call before any thread starts, so every thread inherits the
 * mask) and ignores SIGPIPE. */
void srv_block_signals(void);
/* Starts every index's batcher and writer and the HTTP daemon, prints the address,
 * waits for SIGTERM or SIGINT, drains (drain_s), stops and closes every index. Returns
 * the exit code. */
int srv_run(srv_server *srv, double drain_s, const char *prog);
/* Stops and frees what srv_parse_args / srv_run set up (after a failure). */
void srv_close(srv_server *srv);

int srv_http_start(srv_server *srv, char *msg, size_t msg_len);
/* Stops accepting connections and waits (up to drain_s) for the requests in flight. */
void srv_http_drain(srv_server *srv, double drain_s);
/* Stops the daemon: no handler runs after it. Every suspended request must have been
 * resumed (the batchers and writers stopped) before. */
void srv_http_stop(srv_server *srv);
uint16_t srv_http_port(srv_server *srv);

double srv_now(void);

#endif
