/* main.c — `chimera serve`: options, start-up, signals and an orderly stop.
 *
 *   chimera serve --index NAME=DIR [--index ...] [--host 127.0.0.1] [--port 8080]
 *                 [--threads N] [--api-key-file F] [--max-body MB] [...]
 *
 * Binds to the loopback address unless --host says otherwise: a search service that
 * takes writes should not be reachable from the network by accident. Signals: SIGTERM
 * and SIGINT are blocked in every thread and taken by the main thread with sigwait, so
 * no handler runs inside the library or libmicrohttpd; on either, the server stops
 * accepting connections, answers new requests on open connections 503, lets the
 * requests in flight finish (searches queued in a batch, writes being committed; up to
 * --drain seconds), stops the batchers and writers, closes the indexes and exits 0.
 * SIGPIPE is ignored (a client that hangs up mid-answer is libmicrohttpd's to handle).
 * kill -9 needs no code: a write is answered only after the library's commit is durable,
 * and the library's commit is atomic (docs/format.md). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

int cmd_serve(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f,
            "usage: chimera serve --index NAME=DIR [--index NAME=DIR ...] [options]\n"
            "  --index NAME=DIR      serve the index at DIR as NAME (repeatable; NAME: letters, digits, _ . -)\n"
            "  --host ADDR           address to listen on (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
            "  --port N              TCP port (default 8080; 0: any free port, printed at start)\n"
            "  --threads N           HTTP threads (default 4)\n"
            "  --search-threads N    library threads per batched search (default 0: all CPUs)\n"
            "  --api-key-file F      require the key in F (first line) as 'Authorization: Bearer KEY'\n"
            "  --max-body MB         largest request body (default 64)\n"
            "  --max-parse-memory MB what the JSON of the bodies parsed at once may take (default 1024)\n"
            "  --max-k N             largest k (default 1000)\n"
            "  --max-queries N       most queries per request (default 1024)\n"
            "  --max-query-tokens N  most tokens per query (default 1024)\n"
            "  --max-batch N         most queries per batched library call (default 1024)\n"
            "  --batch-window-us N   how long a batch waits for more requests (default 1000)\n"
            "  --timeout S           idle connection timeout in seconds (default 10)\n"
            "  --drain S             on SIGTERM, wait this long for requests in flight (default 30)\n"
            "  --quiet               no per-request log line\n"
            "Endpoints: GET /health, /indexes, /indexes/NAME, /metrics, /openapi.json; POST\n"
            "/indexes/NAME/search; POST (add), PUT (update), DELETE /indexes/NAME/documents.\n");
}

static int parse_num(const char *prog, const char *opt, const char *s, long long lo, long long hi,
                     long long *out)
{
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "%s: %s needs an integer from %lld to %lld\n", prog, opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int read_key(const char *prog, const char *path, srv_config *cfg)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s: --api-key-file %s: %s\n", prog, path, strerror(errno));
        return -1;
    }
    char line[sizeof cfg->api_key + 2];
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t n = ok ? strcspn(line, "\r\n") : 0;
    line[n] = '\0';
    if (n == 0 || n >= sizeof cfg->api_key) {
        fprintf(stderr, "%s: --api-key-file %s: the first line must hold the key (1 to %zu "
                        "bytes)\n", prog, path, sizeof cfg->api_key - 1);
        return -1;
    }
    memcpy(cfg->api_key, line, n + 1);
    cfg->api_key_len = n;
    return 0;
}

static int valid_name(const char *s, size_t n)
{
    if (n == 0 || n >= SRV_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

static int open_index(srv_server *srv, const char *spec)
{
    const char *eq = strchr(spec, '=');
    if (!eq || !valid_name(spec, (size_t)(eq - spec)) || !eq[1]) {
        fprintf(stderr, "chimera serve: --index %s: expected NAME=DIR with NAME of letters, digits, _ . - "
                        "(under %d characters)\n", spec, SRV_NAME_MAX);
        return -1;
    }
    if (srv_index_find(srv, spec, (size_t)(eq - spec))) {
        fprintf(stderr, "chimera serve: --index %.*s given twice\n", (int)(eq - spec), spec);
        return -1;
    }
    if (srv->n_indexes == SRV_MAX_INDEXES) {
        fprintf(stderr, "chimera serve: at most %d indexes\n", SRV_MAX_INDEXES);
        return -1;
    }
    srv_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->dir = strdup(eq + 1))) {
        free(ix);
        fprintf(stderr, "chimera serve: out of memory\n");
        return -1;
    }
    memcpy(ix->name, spec, (size_t)(eq - spec));
    ix->srv = srv;
    chimera_error err = {0};
    if (chimera_index_open(ix->dir, NULL, &ix->ix, &err) != CHIMERA_OK) {
        fprintf(stderr, "chimera serve: --index %s: %s\n", spec, err.msg);
        free(ix->dir);
        free(ix);
        return -1;
    }
    ix->dim = chimera_index_dim(ix->ix);
    srv->indexes[srv->n_indexes++] = ix;
    return 0;
}

/* The order matters: the batchers and writers finish what is queued (resuming every
 * waiting connection) before the daemon stops, and are freed after it, when no HTTP
 * thread can submit to them any more. */
void srv_close(srv_server *srv)
{
    for (int i = 0; i < srv->n_indexes; i++) {
        srv_batcher_stop(srv->indexes[i]->batcher);
        srv_writer_stop(srv->indexes[i]->writer);
    }
    srv_http_stop(srv);
    for (int i = 0; i < srv->n_indexes; i++) {
        srv_index *ix = srv->indexes[i];
        srv_batcher_free(ix->batcher);
        srv_writer_free(ix->writer);
        chimera_index_close(ix->ix);
        free(ix->dir);
        free(ix);
    }
    srv->n_indexes = 0;
    pthread_mutex_destroy(&srv->log_lock);
}

void srv_init(srv_server *srv)
{
    memset(srv, 0, sizeof *srv);
    srv->prog = "chimera serve";
    pthread_mutex_init(&srv->log_lock, NULL);
    srv_metrics_init(&srv->metrics);
    srv_config *cfg = &srv->cfg;
    cfg->host = "127.0.0.1";
    cfg->port = 8080;
    cfg->http_threads = 4;
    cfg->max_body = (size_t)64 << 20;
    cfg->max_parse_memory = (size_t)1024 << 20;
    cfg->max_k = 1000;
    cfg->max_queries = 1024;
    cfg->max_query_tokens = 1024;
    cfg->max_batch = 1024;
    cfg->batch_window_us = 1000;
    cfg->timeout_s = 10;
}

void srv_block_signals(void)
{
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int srv_parse_args(srv_server *srv, int argc, char **argv, int first, int allow_index,
                   double *drain_s, int *code)
{
    srv_config *cfg = &srv->cfg;
    const char *P = srv->prog;
    *code = 2;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long x;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            *code = 0;
            return -1;
        }
        if (strcmp(a, "--quiet") == 0) {
            cfg->quiet = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "%s: %s needs a value\n", P, a);
            usage(stderr);
            return 1;
        }
        i++;
        if (strcmp(a, "--index") == 0 && allow_index) {
            if (open_index(srv, v)) {
                *code = 1;
                return 1;
            }
        } else if (strcmp(a, "--host") == 0) {
            cfg->host = v;
        } else if (strcmp(a, "--port") == 0) {
            if (parse_num(P, a, v, 0, 65535, &x)) return 1;
            cfg->port = (uint16_t)x;
        } else if (strcmp(a, "--threads") == 0) {
            if (parse_num(P, a, v, 1, 256, &x)) return 1;
            cfg->http_threads = (int)x;
        } else if (strcmp(a, "--search-threads") == 0) {
            if (parse_num(P, a, v, 0, CHIMERA_MAX_THREADS, &x)) return 1;
            cfg->search_threads = (int)x;
        } else if (strcmp(a, "--api-key-file") == 0) {
            if (read_key(P, v, cfg)) return 1;
        } else if (strcmp(a, "--max-body") == 0) {
            if (parse_num(P, a, v, 1, 4096, &x)) return 1;
            cfg->max_body = (size_t)x << 20;
        } else if (strcmp(a, "--max-parse-memory") == 0) {
            if (parse_num(P, a, v, 1, 1 << 20, &x)) return 1;
            cfg->max_parse_memory = (size_t)x << 20;
        } else if (strcmp(a, "--max-k") == 0) {
            if (parse_num(P, a, v, 1, 100000, &x)) return 1;
            cfg->max_k = (uint32_t)x;
        } else if (strcmp(a, "--max-queries") == 0) {
            if (parse_num(P, a, v, 1, 1 << 20, &x)) return 1;
            cfg->max_queries = x;
        } else if (strcmp(a, "--max-query-tokens") == 0) {
            if (parse_num(P, a, v, 1, 1 << 16, &x)) return 1;
            cfg->max_query_tokens = (uint32_t)x;
        } else if (strcmp(a, "--max-batch") == 0) {
            if (parse_num(P, a, v, 1, 1 << 20, &x)) return 1;
            cfg->max_batch = x;
        } else if (strcmp(a, "--batch-window-us") == 0) {
            if (parse_num(P, a, v, 0, 1000000, &x)) return 1;
            cfg->batch_window_us = (int)x;
        } else if (strcmp(a, "--timeout") == 0) {
            if (parse_num(P, a, v, 1, 3600, &x)) return 1;
            cfg->timeout_s = (int)x;
        } else if (strcmp(a, "--drain") == 0) {
            if (parse_num(P, a, v, 0, 3600, &x)) return 1;
            *drain_s = (double)x;
        } else {
            fprintf(stderr, "%s: unknown option '%s'\n", P, a);
            usage(stderr);
            return 1;
        }
    }
    return 0;
}

int srv_run(srv_server *srv, double drain_s, const char *prog)
{
    char msg[256];
    const srv_config *cfg = &srv->cfg;
    for (int i = 0; i < srv->n_indexes; i++) {
        srv_index *ix = srv->indexes[i];
        if (srv_batcher_start(ix, cfg, &srv->metrics, &ix->batcher, msg, sizeof msg) ||
            srv_writer_start(ix, &srv->metrics, &ix->writer, msg, sizeof msg)) {
            fprintf(stderr, "%s: %s\n", prog, msg);
            srv_close(srv);
            return 1;
        }
    }
    if (srv_http_start(srv, msg, sizeof msg)) {
        fprintf(stderr, "%s: %s\n", prog, msg);
        srv_close(srv);
        return 1;
    }
    printf("%s: listening on http://%s%s%s:%u (%d index%s)\n", prog, strchr(cfg->host, ':') ? "[" : "",
           cfg->host, strchr(cfg->host, ':') ? "]" : "", (unsigned)srv_http_port(srv), srv->n_indexes,
           srv->n_indexes == 1 ? "" : "es");
    fflush(stdout);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    int sig = 0;
    while (sigwait(&stop, &sig) != 0) {
    }
    fprintf(stderr, "%s: %s: finishing the requests in flight\n", prog,
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    srv_http_drain(srv, drain_s);
    srv_close(srv);
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    static srv_server srv_storage; /* big (metrics); one per process */
    srv_server *srv = &srv_storage;
    srv_init(srv);
    double drain_s = 30;
    /* Block the stop signals before any thread starts, so every thread inherits the mask
     * and only sigwait in srv_run sees them. */
    srv_block_signals();
    int code = 2;
    int r = srv_parse_args(srv, argc, argv, 2, 1, &drain_s, &code);
    if (r == 0 && srv->n_indexes == 0) {
        fprintf(stderr, "chimera serve: give at least one --index NAME=DIR\n");
        usage(stderr);
        r = 1;
    }
    if (r) {
        srv_close(srv);
        return code;
    }
    return srv_run(srv, drain_s, "chimera serve");
}
