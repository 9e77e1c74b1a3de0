/* Option parsing, progress line and timing for the CLI (see cli.h). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

const char *cli_program = "chimera";
int cli_quiet = 0;

/* stderr, unless this process is one of several saying the same (cli_quiet) */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    if (cli_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* The command's usage: on stdout when asked for (--help: it is the output, to be paged or
 * searched), on stderr after a mistake. */
static void usage_to(FILE *f, const char *cmd, const char *synopsis, const cli_opt *opts, int n)
{
    if (cli_quiet) return;
    fprintf(f, "usage: %s %s %s\n", cli_program, cmd, synopsis);
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-16s %s%s\n", opts[i].name, opts[i].help,
                opts[i].required ? " (required)" : "");
}

static void usage(const char *cmd, const char *synopsis, const cli_opt *opts, int n)
{
    usage_to(stderr, cmd, synopsis, opts, n);
}

static int set_value(const char *cmd, cli_opt *o, const char *v)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case OPT_STR: *(const char **)o->dst = v; return 0;
    case OPT_I64: {
        long long x = strtoll(v, &end, 10);
        if (errno || *end || end == v) break;
        *(int64_t *)o->dst = x;
        return 0;
    }
    case OPT_U32: {
        long long x = strtoll(v, &end, 10);
        if (errno || *end || end == v || x < 0 || x > UINT32_MAX) break;
        *(uint32_t *)o->dst = (uint32_t)x;
        return 0;
    }
    case OPT_THREADS: {
        long long x = strtoll(v, &end, 10);
        if (errno || *end || end == v || x < 0 || x > CHIMERA_MAX_THREADS) {
            say("%s %s: %s: '%s' is not a thread count (0 for one per CPU, "
                            "at most %d)\n", cli_program, cmd, o->name, v, CHIMERA_MAX_THREADS);
            return -1;
        }
        *(uint32_t *)o->dst = (uint32_t)x;
        return 0;
    }
    case OPT_COUNT:
    case OPT_COUNT64: {
        long long x = strtoll(v, &end, 10);
        long long max = o->kind == OPT_COUNT ? (long long)UINT32_MAX : LLONG_MAX;
        if (errno || *end || end == v || x < 1 || x > max) {
            say("%s %s: %s: '%s' is not a valid value (at least 1; leave the option out for "
                "its default)\n", cli_program, cmd, o->name, v);
            return -1;
        }
        if (o->kind == OPT_COUNT) *(uint32_t *)o->dst = (uint32_t)x;
        else *(int64_t *)o->dst = x;
        return 0;
    }
    case OPT_F64: {
        double x = strtod(v, &end);
        if (*end || end == v) break;
        *(double *)o->dst = x;
        return 0;
    }
    case OPT_FLAG: return 0;
    }
    say("%s %s: %s: '%s' is not a valid value\n", cli_program, cmd, o->name, v);
    return -1;
}

int cli_parse(const char *cmd, const char *synopsis, int argc, char **argv, int first,
              cli_opt *opts, int n_opts, const char **pos, int n_pos, int *got_pos)
{
    int np = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage_to(stdout, cmd, synopsis, opts, n_opts);
            return 1;
        }
        if (a[0] != '-' || a[1] == '\0') {
            if (np == n_pos) {
                say("%s %s: unexpected argument '%s'\n", cli_program, cmd, a);
                usage(cmd, synopsis, opts, n_opts);
                return -1;
            }
            pos[np++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        cli_opt *o = NULL;
        for (int j = 0; j < n_opts; j++)
            if (strlen(opts[j].name) == len && strncmp(opts[j].name, a, len) == 0) o = &opts[j];
        if (!o) {
            say("%s %s: unknown option '%.*s'\n", cli_program, cmd, (int)len, a);
            usage(cmd, synopsis, opts, n_opts);
            return -1;
        }
        o->seen = 1;
        if (o->kind == OPT_FLAG) {
            *(int *)o->dst = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) {
            say("%s %s: %s needs a value\n", cli_program, cmd, o->name);
            return -1;
        }
        if (set_value(cmd, o, v) != 0) return -1;
    }
    for (int j = 0; j < n_opts; j++)
        if (opts[j].required && !opts[j].seen) {
            say("%s %s: %s is required\n", cli_program, cmd, opts[j].name);
            usage(cmd, synopsis, opts, n_opts);
            return -1;
        }
    if (got_pos) *got_pos = np;
    return 0;
}

static pthread_mutex_t progress_mu = PTHREAD_MUTEX_INITIALIZER;

void cli_progress(void *user, const char *phase, double fraction)
{
    (void)user;
    static int tty = -1;
    static double start;
    if (tty < 0) tty = isatty(STDERR_FILENO);
    if (!tty) return;
    pthread_mutex_lock(&progress_mu);
    if (fraction <= 0.0) start = cli_now();
    double el = cli_now() - start;
    int width = 30, fill = (int)(fraction * width + 0.5);
    say("\r  %-14s [%.*s%*s] %5.1f%%  %6.1fs", phase, fill,
            "##############################", width - fill, "", 100.0 * fraction, el);
    if (fraction >= 1.0) fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&progress_mu);
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cli_peak_rss_mib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0;
}

const char *cli_message(const char *cmd, const chimera_error *err)
{
    const char *msg = err->msg[0] ? err->msg : chimera_status_str(err->code);
    /* the library's messages often start with the operation's name, which is the
     * command's: "chimera search: search: ..." would say it twice */
    size_t n = strlen(cmd);
    if (strncmp(msg, cmd, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
    return msg;
}

int cli_fail(const char *cmd, const chimera_error *err)
{
    say("%s %s: %s\n", cli_program, cmd, cli_message(cmd, err));
    return 1;
}

int cli_build_choices(const char *cmd, const char *clusters, const char *rerank,
                      chimera_build_opts *bo)
{
    if (chimera_rerank_parse(rerank, &bo->rerank) != CHIMERA_OK) {
        say("%s %s: --rerank must be none, f16, bf16 or f32\n", cli_program, cmd);
        return 2;
    }
    if (strcmp(clusters, "auto") != 0) {
        char *end;
        long k = strtol(clusters, &end, 10);
        if (*end || end == clusters || k <= 0 || k > (1 << 24)) {
            say("%s %s: --clusters '%s' is not a positive count or auto\n", cli_program, cmd,
                clusters);
            return 2;
        }
        bo->n_clusters = (uint32_t)k;
    }
    return 0;
}

int cli_backend(const char *cmd, const char *name, chimera_backend *out)
{
    *out = CHIMERA_BACKEND_AUTO;
    if (!name || chimera_backend_parse(name, out) == CHIMERA_OK) return 0;
    say("%s %s: --backend must be cpu, cuda or auto, not '%s'\n", cli_program, cmd, name);
    return 2;
}

void cli_extra_flags(const chimera_search_params *p, char *buf, size_t size)
{
    int o = 0;
    buf[0] = '\0';
    if (p->impute_scale > 0 && p->impute_scale != 1.0f)
        o += snprintf(buf + o, size - (size_t)o, " --impute-scale %.2f", (double)p->impute_scale);
    if (p->k_interaction && p->k_interaction < p->k_refine && (size_t)o < size)
        o += snprintf(buf + o, size - (size_t)o, " --k-interaction %u", p->k_interaction);
    if (p->rerank_depth && (size_t)o < size)
        snprintf(buf + o, size - (size_t)o, " --rerank-depth %u", p->rerank_depth);
}
