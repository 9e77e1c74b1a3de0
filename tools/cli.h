/* Shared pieces of the command-line front end: option parsing, terminal progress,
 * timing. Commands live in cmd_*.c and use only the public API. */
#ifndef CHIMERA_TOOLS_CLI_H
#define CHIMERA_TOOLS_CLI_H

#include <stdint.h>

#include "chimera.h"

/* The program's name in messages ("chimera"; chimera-mpi sets its own). */
extern const char *cli_program;
/* 1: the helpers below print nothing (chimera-mpi's ranks but 0, which would repeat
 * rank 0's messages). */
extern int cli_quiet;

/* OPT_THREADS: a uint32_t thread count, 0 (one per CPU) to CHIMERA_MAX_THREADS.
 * OPT_COUNT, OPT_COUNT64: a uint32_t / int64_t of at least 1, for options whose 0 in the
 * library means "the default": given, 0 is refused rather than quietly replaced. */
typedef enum {
    OPT_STR, OPT_I64, OPT_U32, OPT_F64, OPT_FLAG, OPT_THREADS, OPT_COUNT, OPT_COUNT64
} opt_kind;

typedef struct cli_opt {
    const char *name;  /* "--docs" or "-k" */
    opt_kind kind;
    void *dst;         /* const char **, int64_t *, uint32_t *, double *, int * */
    const char *help;
    int required;
    int seen;
} cli_opt;

/* Parses argv[first..] against opts; positional arguments go to pos (up to n_pos;
 * *got_pos receives their count). On a mistake prints what is wrong and the usage and
 * returns -1. "--help" prints the usage and returns 1. */
int cli_parse(const char *cmd, const char *synopsis, int argc, char **argv, int first,
              cli_opt *opts, int n_opts, const char **pos, int n_pos, int *got_pos);

/* A chimera_progress_fn drawing one status line on stderr when it is a terminal and
 * staying silent otherwise. Thread-safe. */
void cli_progress(void *user, const char *phase, double fraction);

double cli_now(void);
double cli_peak_rss_mib(void);

/* Installs the SIGBUS handler of guard.c: a mapped file truncated under the command is
 * reported by name ("chimera: error: FILE was truncated or changed while in use") and
 * the process exits with status 1 instead of crashing. */
void cli_sigbus_guard(void);

/* err's message (its status's name when empty) without a leading "cmd: ", which the
 * command's own prefix already says. */
const char *cli_message(const char *cmd, const chimera_error *err);

/* Prints "chimera CMD: message" (cli_message) to stderr and returns 1 (the exit code). */
int cli_fail(const char *cmd, const chimera_error *err);

/* build's --clusters ("auto" or a count up to 2^24) and --rerank (none, f16, bf16, f32)
 * into bo; prints what is wrong and returns 2 (the exit code), else 0. */
int cli_build_choices(const char *cmd, const char *clusters, const char *rerank,
                      chimera_build_opts *bo);

/* The flags of p beyond n_probe, k_refine, k_fullbit and chunks that a search would need
 * to run it (" --impute-scale S --k-interaction N --rerank-depth D", each where it is
 * not the default) into buf (tune's and info's lines). */
void cli_extra_flags(const chimera_search_params *p, char *buf, size_t size);

/* --backend NAME (NULL: auto) into *out; prints a usage message and returns 2 (the exit
 * code) for an unknown name, else 0. */
int cli_backend(const char *cmd, const char *name, chimera_backend *out);

/* cmd_shards.c: chimera build --shards N (0 on success, else the exit code) */
int build_sharded(const char *out, int n_shards, const chimera_corpus *c,
                  const chimera_build_opts *opts);

int cmd_gen(int argc, char **argv);
int cmd_exact(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_index_info(int argc, char **argv);
int cmd_build(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_add(int argc, char **argv);
int cmd_delete(int argc, char **argv);
int cmd_update(int argc, char **argv);
int cmd_compact(int argc, char **argv);
int cmd_meta(int argc, char **argv);
/* server/main.c; linked in only when libmicrohttpd was found (CHIMERA_HAVE_SERVER) */
int cmd_serve(int argc, char **argv);

#endif
