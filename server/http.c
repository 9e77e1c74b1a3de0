/* http.c — the HTTP plumbing of `chimera serve` over libmicrohttpd.
 *
 * libmicrohttpd runs a pool of threads, each with its own epoll loop, so a slow or
 * stalled client costs a socket and a little memory, never a thread: its connection sits
 * in an epoll set until it sends more or the idle timeout (--timeout) closes it. The
 * same holds for requests that wait for the batcher or the writer: their connection is
 * suspended (MHD_suspend_connection) before the work is queued, and the thread that
 * finishes the work fills in the answer and resumes it, so 128 clients waiting on one
 * batched search hold no pool thread. (Blocking the handler on a condition variable
 * instead was the first design: it caps a batch at the pool size and lets a burst of
 * waits starve requests that need no batch, such as /health.)
 *
 * Per request, in order: the first call (headers only) checks the drain flag, the API key
 * and a declared Content-Length against --max-body, answering 503, 401 or 413 before
 * any body is read; body chunks are collected up to the limit (a chunked body that grows
 * past it is answered 413); the last call routes the request. One log line per request,
 * and its metrics, are written when libmicrohttpd reports it complete.
 *
 * Errors the HTTP layer itself finds (a request line that does not parse, headers larger
 * than the connection memory limit) are answered by libmicrohttpd with its own short
 * bodies before any handler sees the request; everything the handlers answer is JSON. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

enum { ST_RECEIVING, ST_ANSWERED, ST_WAITING };

typedef struct conn_req {
    srv_server *srv;
    struct MHD_Connection *conn;
    srv_endpoint ep;
    char method[16];
    char path[256];
    char *body;
    size_t len, cap;
    int too_big;
    int state;
    int status;                 /* the status sent (0: none, e.g. the client went away) */
    srv_pending pending;        /* for a request that waits on the batcher or writer */
    atomic_int ready;           /* set (release) by pending.done before the resume */
    double t0;
} conn_req;

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Queues a's answer (its body passes to libmicrohttpd). */
static enum MHD_Result send_answer(conn_req *r, srv_answer *a)
{
    if (!a->body) {
        srv_error e = {0};
        srv_fail(&e, 500, "INTERNAL", "out of memory");
        srv_answer_error(a, &e);
    }
    struct MHD_Response *resp =
        a->body ? MHD_create_response_from_buffer(a->len, a->body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!resp) {
        free(a->body);
        a->body = NULL;
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    }
    a->body = NULL;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            a->ctype ? a->ctype : "application/json");
    if (a->status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (a->status == 405 && a->allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, a->allow);
    /* 503s are passing states (busy, out of memory, shutting down): say when to retry;
     * lost shard processes stay lost until the service is restarted */
    if (a->status == 503 && !a->lasting) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    /* An answer sent before the body was read leaves the rest of the body unread on the
     * socket: the connection cannot carry another request. */
    if (r->state == ST_RECEIVING && r->len == 0 && r->status == 0 && a->early)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    r->status = a->status;
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)a->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result answer_error(conn_req *r, int status, const char *code, const char *msg,
                                    int early)
{
    srv_error e = {0};
    srv_fail(&e, status, code, "%s", msg);
    srv_answer a = {0};
    srv_answer_error(&a, &e);
    a.early = early;
    enum MHD_Result ok = send_answer(r, &a);
    r->state = ST_ANSWERED;
    return ok;
}

/* Compares the key given with the server's in time that depends only on the server's
 * key length, so the answer's timing says nothing about how much of a guess matched. */
static int key_matches(const srv_config *cfg, const char *given)
{
    size_t glen = given ? strlen(given) : 0;
    volatile unsigned char diff = (unsigned char)(glen != cfg->api_key_len);
    for (size_t i = 0; i < cfg->api_key_len; i++) {
        unsigned char g = i < glen ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)cfg->api_key[i]);
    }
    return given && diff == 0;
}

static int authorized(srv_server *srv, struct MHD_Connection *c, srv_endpoint ep)
{
    if (srv->cfg.api_key_len == 0) return 1;
    /* Liveness probes carry no secrets and /health reveals nothing: it stays open, as
     * Qdrant's health endpoints do. */
    if (ep == SRV_EP_HEALTH) return 1;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) return key_matches(&srv->cfg, auth + 7);
    const char *k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "api-key");
    if (!k) k = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-API-Key");
    return key_matches(&srv->cfg, k);
}

static void pending_done(srv_pending *p)
{
    conn_req *r = (conn_req *)((char *)p - offsetof(conn_req, pending));
    atomic_store_explicit(&r->ready, 1, memory_order_release);
    MHD_resume_connection(r->conn);
}

static void copy_printable(char *dst, size_t cap, const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = ch >= 0x21 && ch < 0x7f ? (char)ch : '?';
    }
    dst[i] = '\0';
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    srv_server *srv = cls;
    conn_req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->srv = srv;
        r->conn = c;
        r->t0 = srv_now();
        r->ep = srv_route_endpoint(method, url);
        r->pending.done = pending_done;
        copy_printable(r->method, sizeof r->method, method);
        copy_printable(r->path, sizeof r->path, url);
        *con_cls = r;
        atomic_fetch_add(&srv->metrics.in_flight, 1);
        if (atomic_load(&srv->draining))
            return answer_error(r, 503, "SHUTTING_DOWN", "the server is shutting down", 1);
        if (!authorized(srv, c, r->ep))
            return answer_error(r, 401, "UNAUTHORIZED",
                                "missing or wrong API key (Authorization: Bearer KEY, or api-key: KEY)", 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno || end == cl || n > srv->cfg.max_body) {
                char msg[160];
                snprintf(msg, sizeof msg, "the body is larger than the limit of %zu bytes (--max-body)",
                         srv->cfg.max_body);
                return answer_error(r, 413, "PAYLOAD_TOO_LARGE", msg, 1);
            }
        }
        return MHD_YES;
    }
    if (r->state == ST_ANSWERED) {
        *upload_data_size = 0; /* an early answer is queued: the rest is dropped */
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->too_big) return MHD_YES;
        if (n > srv->cfg.max_body - r->len) {
            r->too_big = 1;
            free(r->body);
            r->body = NULL;
            r->len = r->cap = 0;
            return MHD_YES;
        }
        if (r->len + n + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 4096;
            while (cap < r->len + n + 1) cap *= 2;
            char *b = realloc(r->body, cap);
            if (!b) return MHD_NO;
            r->body = b;
            r->cap = cap;
        }
        memcpy(r->body + r->len, upload_data, n);
        r->len += n;
        r->body[r->len] = '\0';
        return MHD_YES;
    }
    if (r->state == ST_WAITING) {
        /* resumed by pending_done: the answer is in */
        if (!atomic_load_explicit(&r->ready, memory_order_acquire)) return MHD_YES;
        r->state = ST_ANSWERED;
        return send_answer(r, &r->pending.answer);
    }
    if (r->too_big) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body is larger than the limit of %zu bytes (--max-body)",
                 srv->cfg.max_body);
        return answer_error(r, 413, "PAYLOAD_TOO_LARGE", msg, 0);
    }
    const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    int may_wait = r->ep == SRV_EP_SEARCH || r->ep == SRV_EP_DOCUMENTS;
    if (may_wait) {
        /* Suspend before the work is queued: the batcher may finish it, and resume the
         * connection, before this call returns. */
        r->state = ST_WAITING;
        MHD_suspend_connection(c);
        srv_answer now = {0};
        srv_route_result rr = srv_route(srv, method, url, ctype, r->body ? r->body : "", r->len,
                                        &now, &r->pending);
        if (rr == SRV_ROUTE_ANSWERED) {
            r->pending.answer = now;
            pending_done(&r->pending);
        }
        return MHD_YES;
    }
    srv_answer now = {0};
    srv_route(srv, method, url, ctype, r->body ? r->body : "", r->len, &now, NULL);
    r->state = ST_ANSWERED;
    return send_answer(r, &now);
}

static void log_line(srv_server *srv, const conn_req *r, double ms)
{
    if (srv->cfg.quiet) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    pthread_mutex_lock(&srv->log_lock);
    fprintf(stderr, "%s.%03ldZ %s %s %d %.2fms\n", when, ts.tv_nsec / 1000000, r->method, r->path,
            r->status, ms);
    fflush(stderr);
    pthread_mutex_unlock(&srv->log_lock);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    srv_server *srv = cls;
    conn_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    double el = srv_now() - r->t0;
    log_line(srv, r, 1e3 * el);
    srv_metrics_request(&srv->metrics, r->ep, r->status, el);
    atomic_fetch_sub(&srv->metrics.in_flight, 1);
    free(r->pending.answer.body);
    free(r->body);
    free(r);
}

/* libmicrohttpd's own messages (a socket error, a refused connection) go to the log. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    srv_server *srv = cls;
    if (srv->cfg.quiet) return;
    pthread_mutex_lock(&srv->log_lock);
    fprintf(stderr, "libmicrohttpd: ");
    vfprintf(stderr, fmt, ap);
    fflush(stderr);
    pthread_mutex_unlock(&srv->log_lock);
}

int srv_http_start(srv_server *srv, char *msg, size_t msg_len)
{
    const srv_config *cfg = &srv->cfg;
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    struct sockaddr *addr;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, cfg->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons(cfg->port);
        addr = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, cfg->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons(cfg->port);
        addr = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(msg, msg_len, "--host %s: not an IPv4 or IPv6 address", cfg->host);
        return -1;
    }
    srv->daemon = MHD_start_daemon(
        flags, cfg->port, NULL, NULL, on_request, srv,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, srv, /* first, so every message goes to it */
        MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->http_threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->timeout_s,
        /* headers and the request line must fit this; more is answered 431 */
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
        MHD_OPTION_END);
    if (!srv->daemon) {
        snprintf(msg, msg_len, "cannot listen on %s port %u: %s", cfg->host, (unsigned)cfg->port,
                 errno ? strerror(errno) : "libmicrohttpd refused the options");
        return -1;
    }
    return 0;
}

uint16_t srv_http_port(srv_server *srv)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : srv->cfg.port;
}

void srv_http_drain(srv_server *srv, double drain_s)
{
    if (!srv->daemon) return;
    atomic_store(&srv->draining, 1);
    /* Stop accepting: the listening socket closes, connections already open stay. */
    MHD_socket ls = MHD_quiesce_daemon(srv->daemon);
    if (ls != MHD_INVALID_SOCKET) close(ls);
    double until = srv_now() + drain_s;
    while (atomic_load(&srv->metrics.in_flight) > 0 && srv_now() < until) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void srv_http_stop(srv_server *srv)
{
    if (!srv->daemon) return;
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
}
