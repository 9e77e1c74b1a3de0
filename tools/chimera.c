/* chimera: the command-line front end. Uses only the public API (include/chimera.h).
 *
 *   chimera gen     write a synthetic corpus (tokens, doclens, queries, qrels)
 *   chimera exact   exact Chamfer top-k by brute force: the ground truth
 *   chimera eval    Recall@k against the truth; MRR@10 / NDCG@10 against qrels
 *   chimera build   build an index (k-means, posting lists, graph, RaBitQ codes)
 *   chimera info    describe an index, or what this build and machine offer
 *   chimera check   verify an index deeply
 *   chimera add / delete / update / compact   change an index without rebuilding it
 *   chimera serve   the HTTP/JSON service (server/), when built with libmicrohttpd
 *
 * Before doing anything it checks whether the BLAS library fell back to generic kernels
 * on this CPU (see chimera_blas_suggested_coretype) and, if so and the user has set no
 * OPENBLAS_CORETYPE, re-executes itself once with the better core type: the variable is
 * read only when the library loads. CHIMERA_NO_REEXEC=1 disables this. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "shards.h"

int cmd_info(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    chimera_runtime_info ri;
    chimera_runtime_info_get(&ri);
    printf("chimera %s\n", chimera_version());
    printf("  simd        %s\n", ri.simd);
    printf("  blas core   %s%s%s\n", ri.blas_core,
           ri.blas_suggested_coretype ? " (generic; set OPENBLAS_CORETYPE=" : "",
           ri.blas_suggested_coretype ? ri.blas_suggested_coretype : "");
    if (ri.blas_suggested_coretype) printf(")\n");
    printf("  cpus        %d\n", ri.n_cpus);
    printf("  cuda        %s; %d device(s): %s\n", ri.cuda_compiled ? "compiled in" : "not compiled",
           ri.n_cuda_devices, ri.cuda_status);
    return 0;
}

/* To f: stdout when asked for (help), stderr after a mistake. */
static void usage(FILE *f)
{
    fprintf(f,
            "usage: chimera COMMAND [options]   (chimera COMMAND --help for its options)\n"
            "  gen      write a synthetic corpus\n"
            "  exact    exact Chamfer top-k (ground truth)\n"
            "  eval     Recall@k / MRR@10 / NDCG@10 of a run\n"
            "  build    build an index\n"
            "  search   search an index (the 3-stage pipeline)\n"
            "  tune     find the fastest setting for a target recall, store it in the index\n"
            "  bench    recall/throughput sweep against exact search (CSV)\n"
            "  info     [IDX] describe an index, or this build and machine\n"
            "  check    IDX: verify an index's checksums, structure and values\n"
            "  add      IDX: append documents (new ids) without a rebuild\n"
            "  delete   IDX: delete documents by id\n"
            "  update   IDX: replace documents, keeping their ids\n"
            "  compact  IDX: drop deleted documents, merge appended segments\n"
            "  meta     import IDX --jsonl F | --csv F: document metadata for --filter\n"
            "  serve    --index NAME=IDX: the HTTP/JSON search service\n"
            "  version  print the version\n");
}

static void maybe_reexec(char **argv)
{
    const char *core = chimera_blas_suggested_coretype();
    const char *no = getenv("CHIMERA_NO_REEXEC");
    if (!core || (no && strcmp(no, "0") != 0)) return;
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* exec failed: carry on with what we have */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("chimera %s (simd %s)\n", chimera_version(), chimera_simd_level());
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    maybe_reexec(argv);
    cli_sigbus_guard();
    if (strcmp(cmd, "gen") == 0) return cmd_gen(argc, argv);
    if (strcmp(cmd, "exact") == 0) return cmd_exact(argc, argv);
    if (strcmp(cmd, "eval") == 0) return cmd_eval(argc, argv);
    if (strcmp(cmd, "info") == 0) return cmd_index_info(argc, argv);
    if (strcmp(cmd, "build") == 0) return cmd_build(argc, argv);
    /* These work on one index: on a sharded layout, say so (rather than "no manifest"). */
    static const char *const one_index[] = {"check", "tune", "bench", "add", "delete",
                                            "update", "compact", "meta"};
    for (size_t i = 0; i < sizeof one_index / sizeof *one_index; i++) {
        int at = strcmp(cmd, "meta") == 0 ? 3 : 2; /* meta import IDX */
        if (strcmp(cmd, one_index[i]) == 0 && argc > at && argv[at][0] != '-' &&
            shards_is_layout(argv[at])) {
            int change = i >= 3; /* add, delete, update, compact, meta import */
            fprintf(stderr, "chimera %s: %s is a sharded index (shards.json): %s works on one "
                    "index, such as one of the shards `chimera info %s` lists%s\n", cmd,
                    argv[at], cmd, argv[at],
                    change ? "; changes to the whole layout go through chimera-mpi serve's API"
                           : "");
            return 2;
        }
    }
    if (strcmp(cmd, "check") == 0) return cmd_check(argc, argv);
    if (strcmp(cmd, "search") == 0) return cmd_search(argc, argv);
    if (strcmp(cmd, "tune") == 0) return cmd_tune(argc, argv);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc, argv);
    if (strcmp(cmd, "add") == 0) return cmd_add(argc, argv);
    if (strcmp(cmd, "delete") == 0) return cmd_delete(argc, argv);
    if (strcmp(cmd, "update") == 0) return cmd_update(argc, argv);
    if (strcmp(cmd, "compact") == 0) return cmd_compact(argc, argv);
    if (strcmp(cmd, "meta") == 0) return cmd_meta(argc, argv);
    if (strcmp(cmd, "serve") == 0) {
#ifdef CHIMERA_HAVE_SERVER
        return cmd_serve(argc, argv);
#else
        fprintf(stderr, "chimera serve: this chimera was built without the HTTP server: libmicrohttpd "
                        "was not found when it was configured (install libmicrohttpd-dev, e.g. with "
                        "scripts/install-deps.sh, and rebuild)\n");
        return 2;
#endif
    }
    fprintf(stderr, "chimera: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
