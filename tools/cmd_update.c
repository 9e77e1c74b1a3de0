/* chimera add | delete | update | compact: change an index without rebuilding it. Each
 * command is one atomic commit (the library's chimera_index_add and friends): it prints
 * what it did when the change is on disk, and on any error leaves the index as it was. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void print_report(const char *dir, const chimera_update_report *r, double t0)
{
    char deleted[64] = "none deleted";
    if (r->n_deleted)
        snprintf(deleted, sizeof deleted, "%lld deleted, not yet compacted",
                 (long long)r->n_deleted);
    printf("%s: generation %llu, %lld documents (%s), %u segment%s\n", dir,
           (unsigned long long)r->generation, (long long)r->n_docs, deleted, r->n_segments,
           r->n_segments == 1 ? "" : "s");
    printf("time: %.3fs", r->seconds);
    if (r->tokens_added)
        printf(" (assign %.3fs, encode %.3fs, write and commit %.3fs; %.0f tokens/s)",
               r->assign_seconds, r->encode_seconds, r->write_seconds,
               r->seconds > 0 ? (double)r->tokens_added / r->seconds : 0.0);
    printf(" | with loading %.3fs, peak RSS %.0f MiB\n", cli_now() - t0,
           r->peak_rss_bytes / 1048576.0);
}

static int add_or_update(const char *cmd, int replace, int argc, char **argv)
{
    const char *tokens = NULL, *doclens = NULL, *ids = NULL, *meta = NULL, *pos[1];
    int missing_ok = 0, no_sync = 0, np = 0;
    uint32_t threads = 0;
    cli_opt opts[] = {
        {"--tokens", OPT_STR, &tokens, "token matrix .npy [n_tokens, dim] (float32/16)", 1, 0},
        {"--doclens", OPT_STR, &doclens, "document lengths .npy [n_docs] (int32/64)", 1, 0},
        {"--ids", OPT_STR, &ids, "document ids (.npy int64 or text, one per line)", 1, 0},
        {"--meta", OPT_STR, &meta, "the documents' metadata, JSON Lines ({\"id\": ..., fields})", 0, 0},
        {"--threads", OPT_THREADS, &threads, "threads (default: all CPUs)", 0, 0},
        {"--no-sync", OPT_FLAG, &no_sync, "skip fsyncs (scratch indexes)", 0, 0},
        /* update only (the last entry, left out of add's list) */
        {"--missing-ok", OPT_FLAG, &missing_ok,
         "add documents whose id is not in the index instead of failing", 0, 0},
    };
    int n_opts = (int)(sizeof opts / sizeof opts[0]) - (replace ? 0 : 1);
    char synopsis[96];
    snprintf(synopsis, sizeof synopsis, "IDX --tokens T.npy --doclens L.npy --ids I.npy%s",
             replace ? " [--missing-ok]" : "");
    int r = cli_parse(cmd, synopsis, argc, argv, 2, opts, n_opts, pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    if (np != 1) {
        fprintf(stderr, "usage: chimera %s %s\n", cmd, synopsis);
        return 2;
    }
    chimera_error err;
    chimera_corpus *c;
    double t0 = cli_now();
    if (chimera_corpus_open(tokens, doclens, ids, NULL, &c, &err) != CHIMERA_OK)
        return cli_fail(cmd, &err);
    chimera_update_opts uo = {.missing_ok = missing_ok, .no_sync = no_sync,
                              .n_threads = (int)threads, .metadata = meta};
    chimera_update_report rep;
    chimera_status s = replace ? chimera_index_update(pos[0], c, &uo, &rep, &err)
                               : chimera_index_add(pos[0], c, &uo, &rep, &err);
    chimera_corpus_close(c);
    if (s != CHIMERA_OK) return cli_fail(cmd, &err);
    if (replace)
        printf("updated %lld documents (%lld replaced, %lld new), %lld tokens", 
               (long long)rep.docs_added, (long long)rep.docs_deleted, (long long)rep.ids_missing,
               (long long)rep.tokens_added);
    else
        printf("added %lld documents, %lld tokens", (long long)rep.docs_added,
               (long long)rep.tokens_added);
    if (rep.drift_below >= 0)
        printf("; %.1f%% of them below the build's 10th-percentile centroid similarity%s",
               100.0 * rep.drift_below,
               rep.drift_below > 0.25 ? " (they fit the centroids worse than the built ones; "
                                        "see chimera info)" : "");
    printf("%s\n", rep.merged ? "; appended segments merged" : "");
    if (rep.meta_repaired)
        printf("metadata: %d interrupted change(s) replayed\n", rep.meta_repaired);
    if (rep.assign_recall < 1)
        printf("assignment: %.4f of the new tokens got their exact nearest centroid (sample)\n",
               rep.assign_recall);
    print_report(pos[0], &rep, t0);
    return 0;
}

int cmd_add(int argc, char **argv) { return add_or_update("add", 0, argc, argv); }
int cmd_update(int argc, char **argv) { return add_or_update("update", 1, argc, argv); }

int cmd_delete(int argc, char **argv)
{
    /* --id N may repeat, and --filter-args takes every argument up to the next option:
     * both gathered here, the rest goes to the parser */
    int n_fargs = 0;
    const char **fargs = malloc((size_t)argc * sizeof *fargs);
    int64_t *list = malloc((size_t)argc * sizeof *list);
    char **rest = malloc((size_t)(argc + 1) * sizeof *rest);
    if (!fargs || !list || !rest) {
        free(fargs);
        free(list);
        free(rest);
        fprintf(stderr, "chimera delete: out of memory\n");
        return 1;
    }
    int n_list = 0, n_rest = 0;
    for (int i = 0; i < argc; i++) {
        if (i >= 2 && strcmp(argv[i], "--id") == 0) {
            char *end = NULL;
            errno = 0; /* an id past the 64-bit range is refused, not clamped to it */
            long long v = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || *argv[i + 1] == '\0' || *end || errno) {
                fprintf(stderr, "chimera delete: --id needs an integer id (64-bit)\n");
                free(fargs);
                free(list);
                free(rest);
                return 2;
            }
            list[n_list++] = v;
            i++;
            continue;
        }
        if (i >= 2 && strcmp(argv[i], "--filter-args") == 0) {
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0)
                fargs[n_fargs++] = argv[++i];
            continue;
        }
        rest[n_rest++] = argv[i];
    }
    rest[n_rest] = NULL;
    const char *ids_path = NULL, *filter = NULL, *pos[1];
    int missing_ok = 0, no_sync = 0, np = 0;
    uint32_t filter_ms = 0;
    cli_opt opts[] = {
        {"--ids", OPT_STR, &ids_path, "ids to delete (.npy int64 or text, one per line)", 0, 0},
        {"--filter", OPT_STR, &filter,
         "delete the documents whose metadata satisfies this SQL expression (chimera meta "
         "import), ? bound to --filter-args (every argument up to the next option)", 0, 0},
        {"--filter-timeout-ms", OPT_U32, &filter_ms,
         "the filter's time limit in milliseconds (default 2000)", 0, 0},
        {"--missing-ok", OPT_FLAG, &missing_ok, "skip ids that are not in the index", 0, 0},
        {"--no-sync", OPT_FLAG, &no_sync, "skip fsyncs (scratch indexes)", 0, 0},
    };
    const char *syn = "IDX (--ids I.npy | --id N [--id M ...]) [--missing-ok] | "
                      "IDX --filter EXPR [--filter-args A ...] [--filter-timeout-ms MS]";
    int r = cli_parse("delete", syn, n_rest, rest, 2, opts, sizeof opts / sizeof opts[0], pos, 1, &np);
    int rc = 0;
    int64_t *ids = NULL, n = 0;
    chimera_error err;
    if (r) {
        rc = r < 0 ? 2 : 0;
        goto done;
    }
    if (np != 1 || (!ids_path && n_list == 0 && !filter) || (filter && (ids_path || n_list)) ||
        (n_fargs && !filter) || (filter && missing_ok)) {
        if (filter && missing_ok)
            fprintf(stderr, "chimera delete: --missing-ok is for ids; with --filter, matching "
                    "records of ids not in the index are always skipped\n");
        fprintf(stderr, "usage: chimera delete %s\n", syn);
        rc = 2;
        goto done;
    }
    double t0 = cli_now();
    if (filter_ms > INT32_MAX) filter_ms = INT32_MAX;
    chimera_update_opts uo = {.missing_ok = missing_ok, .no_sync = no_sync,
                              .filter_timeout_ms = (int)filter_ms};
    chimera_update_report rep;
    if (filter) {
        if (chimera_index_delete_where(pos[0], filter, fargs, n_fargs, &uo, &rep, &err) != CHIMERA_OK) {
            rc = cli_fail("delete", &err);
            goto done;
        }
        goto report;
    }
    int64_t *from_file = NULL;
    if (ids_path && chimera_ids_read(ids_path, &from_file, &n, &err) != CHIMERA_OK) {
        rc = cli_fail("delete", &err);
        goto done;
    }
    ids = malloc((size_t)(n + n_list + 1) * sizeof *ids);
    if (ids && n) memcpy(ids, from_file, (size_t)n * sizeof *ids);
    chimera_ids_free(from_file);
    if (!ids) {
        fprintf(stderr, "chimera delete: out of memory\n");
        rc = 1;
        goto done;
    }
    memcpy(ids + n, list, (size_t)n_list * sizeof *ids);
    n += n_list;
    if (chimera_index_delete(pos[0], ids, n, &uo, &rep, &err) != CHIMERA_OK) {
        rc = cli_fail("delete", &err);
        goto done;
    }
report:
    printf("deleted %lld documents", (long long)rep.docs_deleted);
    if (rep.ids_missing)
        printf(filter ? " (%lld matching records of ids not in the index, kept)"
                      : " (%lld ids not in the index, skipped)", (long long)rep.ids_missing);
    printf("%s%s\n", rep.docs_deleted ? "" : "; nothing committed",
           rep.merged ? "; deletion lists merged" : "");
    print_report(pos[0], &rep, t0);
    if (rep.n_docs > 0 && rep.n_deleted * 5 > rep.n_docs)
        printf("note: %.0f%% of the documents are deleted; chimera compact %s reclaims their "
               "space and time\n", 100.0 * (double)rep.n_deleted / (double)rep.n_docs, pos[0]);
done:
    free(ids);
    free(fargs);
    free(list);
    free(rest);
    return rc;
}

int cmd_compact(int argc, char **argv)
{
    const char *pos[1];
    int no_sync = 0, np = 0, recluster = 0;
    uint32_t clusters = 0, threads = 0;
    int64_t seed = 0;
    cli_opt opts[] = {
        {"--recluster", OPT_FLAG, &recluster, "retrain the centroids over the live documents "
                                              "(from the stored vectors of a --rerank index, else "
                                              "from their codes; calibrates the defaults "
                                              "again)", 0, 0},
        {"--clusters", OPT_COUNT, &clusters, "--recluster: IVF clusters (default: auto)", 0, 0},
        {"--threads", OPT_THREADS, &threads, "--recluster: threads (default: all CPUs)", 0, 0},
        {"--seed", OPT_I64, &seed, "--recluster: k-means seed (default 0)", 0, 0},
        {"--no-sync", OPT_FLAG, &no_sync, "skip fsyncs (scratch indexes)", 0, 0},
    };
    int r = cli_parse("compact", "IDX [--recluster]", argc, argv, 2, opts,
                      sizeof opts / sizeof opts[0], pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    if (np != 1) {
        fprintf(stderr, "usage: chimera compact IDX [--recluster]\n");
        return 2;
    }
    chimera_error err;
    chimera_update_opts uo = {.no_sync = no_sync, .progress = cli_progress,
                              .recluster = recluster, .n_clusters = clusters,
                              .n_threads = (int)threads, .seed = (uint64_t)seed};
    chimera_update_report rep;
    double t0 = cli_now();
    if (chimera_index_compact(pos[0], &uo, &rep, &err) != CHIMERA_OK) return cli_fail("compact", &err);
    if (recluster)
        printf("reclustered: centroids retrained over %lld live documents, %lld deleted dropped\n",
               (long long)rep.n_docs, (long long)rep.docs_deleted);
    else if (!rep.merged)
        printf("%s is already compact (one segment, nothing deleted): nothing written\n", pos[0]);
    else
        printf("compacted: %lld deleted documents dropped, segments merged into one\n",
               (long long)rep.docs_deleted);
    print_report(pos[0], &rep, t0);
    return 0;
}

/* chimera meta import IDX (--jsonl F | --csv F) */
int cmd_meta(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[2], "import") != 0) {
        int help = argc == 3 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0);
        fprintf(help ? stdout : stderr, "usage: chimera meta import IDX (--jsonl F.jsonl | "
                "--csv F.csv)   (chimera meta import --help for its options)\n");
        return help ? 0 : 2;
    }
    const char *jsonl = NULL, *csv = NULL, *pos[1];
    int no_sync = 0, np = 0;
    cli_opt opts[] = {
        {"--jsonl", OPT_STR, &jsonl, "records, one JSON object per line, each with an \"id\"", 0, 0},
        {"--csv", OPT_STR, &csv, "records as CSV with a header row (one column \"id\")", 0, 0},
        {"--no-sync", OPT_FLAG, &no_sync, "skip fsyncs (scratch indexes)", 0, 0},
    };
    /* the synopsis says it: an import is the whole of the metadata, not an addition */
    int r = cli_parse("meta import", "IDX (--jsonl F | --csv F)   (replaces all the index's "
                      "metadata; add --meta and update --meta upsert only their documents)",
                      argc, argv, 3, opts,
                      sizeof opts / sizeof opts[0], pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    if (np != 1 || (jsonl != NULL) == (csv != NULL)) {
        fprintf(stderr, "usage: chimera meta import IDX (--jsonl F.jsonl | --csv F.csv)\n");
        return 2;
    }
    chimera_error err;
    chimera_update_opts uo = {.no_sync = no_sync};
    chimera_update_report rep;
    double t0 = cli_now();
    if (chimera_index_meta_import(pos[0], jsonl ? jsonl : csv, csv != NULL, &uo, &rep, &err) !=
        CHIMERA_OK)
        return cli_fail("meta import", &err);
    printf("imported %lld metadata records (%.0f records/s); they replace the metadata the "
           "index had\n", (long long)rep.meta_records,
           rep.seconds > 0 ? (double)rep.meta_records / rep.seconds : 0.0);
    print_report(pos[0], &rep, t0);
    return 0;
}
