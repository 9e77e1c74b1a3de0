/* chimera build | info | check: make an index, describe it, verify it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shards.h"

/* The calibrated defaults (build, info): one line per k, and a warning where the
 * index's bits could not reach the target. */
static void print_calibration(const char *label, double target, int n,
                              const chimera_calibration *cal, int stale)
{
    for (int i = 0; i < n; i++) {
        char scale[40] = ""; /* shown where it moved: an index from before 0.7.0 has none */
        if (cal[i].impute_scale > 0 && cal[i].impute_scale != 1.0f)
            snprintf(scale, sizeof scale, " --impute-scale %.2f", (double)cal[i].impute_scale);
        printf("  %-14s k=%-4u --nprobe %u --k-refine %u --k-fullbit %u --chunks %u%s: held-out "
               "Recall@%u %.4f (95%% lower bound %.4f)%s%s\n", i ? "" : label, cal[i].k,
               cal[i].n_probe, cal[i].k_refine, cal[i].k_fullbit, cal[i].chunks, scale, cal[i].k,
               cal[i].recall, cal[i].recall_low,
               cal[i].reached ? ""
               : cal[i].recall >= target
                   ? "; the interval is too wide to certify the target (too few held-out "
                     "pseudo-queries for the spread of their recall): the best found"
                   : "; below the target: the best found (the index's bits cap recall; "
                     "build --bits 8, or --rerank f16 and search --rerank-depth, lift it)",
               stale ? "; stale (a fifth of the documents changed): not used" : "");
    }
    if (n) printf("  %-14s the defaults of a search without --nprobe etc. (target Recall@k %.2f)\n",
                  "", target);
}

int cmd_build(int argc, char **argv)
{
    const char *tokens = NULL, *doclens = NULL, *ids = NULL, *out = NULL, *clusters = "auto";
    const char *rerank_s = "none", *codebook = NULL;
    uint32_t bits = 4, degree = 0, threads = 0, shards = 0;
    int64_t seed = 0;
    int allow_empty = 0, no_sync = 0, no_calibrate = 0;
    cli_opt opts[] = {
        {"--tokens", OPT_STR, &tokens, "token matrix .npy [n_tokens, dim] (float32/16)", 1, 0},
        {"--doclens", OPT_STR, &doclens, "document lengths .npy [n_docs] (int32/64)", 1, 0},
        {"--ids", OPT_STR, &ids, "document ids (.npy int64 or text, one per line)", 0, 0},
        {"--out", OPT_STR, &out, "index directory (replaced atomically if it exists)", 1, 0},
        {"--bits", OPT_COUNT, &bits, "bits per dimension of the full codes, 1..8 (default 4)",
         0, 0},
        {"--clusters", OPT_STR, &clusters, "IVF clusters, or auto (~1 per 100 tokens)", 0, 0},
        {"--graph-degree", OPT_COUNT, &degree, "centroid graph out-degree (default 32)", 0, 0},
        {"--threads", OPT_THREADS, &threads, "worker threads (default: all CPUs)", 0, 0},
        {"--seed", OPT_I64, &seed, "random seed (default 0)", 0, 0},
        {"--allow-empty", OPT_FLAG, &allow_empty, "accept empty documents (never returned)", 0, 0},
        {"--no-sync", OPT_FLAG, &no_sync, "skip fsyncs (scratch indexes)", 0, 0},
        {"--rerank", OPT_STR, &rerank_s,
         "also store the original vectors as f16, bf16 or f32 for search --rerank-depth "
         "(default none)", 0, 0},
        {"--no-calibrate", OPT_FLAG, &no_calibrate,
         "skip calibrating the default search parameters (searches use the library's)", 0, 0},
        {"--shards", OPT_U32, &shards,
         "cut the corpus into N shard indexes balanced by tokens, sharing one codebook, under "
         "--out (search it as any index; chimera-mpi runs one process per shard)", 0, 0},
        {"--codebook", OPT_STR, &codebook,
         "use this codebook (a sharded index's g<N>-codebook.bin) instead of training", 0, 0},
    };
    int r = cli_parse("build", "--tokens T.npy --doclens L.npy --out IDX [--bits 4] [--clusters K] "
                      "[--rerank f16]",
                      argc, argv, 2, opts, sizeof opts / sizeof opts[0], NULL, 0, NULL);
    if (r) return r < 0 ? 2 : 0;
    chimera_build_opts bo = {.bits = bits, .graph_degree = degree, .n_threads = (int)threads,
                             .seed = (uint64_t)seed, .no_sync = no_sync, .progress = cli_progress,
                             .no_calibrate = no_calibrate};
    if (cli_build_choices("build", clusters, rerank_s, &bo)) return 2;
    chimera_error err;
    chimera_corpus *c;
    chimera_corpus_opts co = {.allow_empty = allow_empty};
    double t0 = cli_now();
    if (chimera_corpus_open(tokens, doclens, ids, &co, &c, &err) != CHIMERA_OK)
        return cli_fail("build", &err);
    chimera_codebook *cb = NULL;
    if (codebook && chimera_codebook_load(codebook, &cb, &err) != CHIMERA_OK) {
        chimera_corpus_close(c);
        return cli_fail("build", &err);
    }
    bo.codebook = cb;
    if (shards) {
        int rc = build_sharded(out, (int)shards, c, &bo);
        chimera_codebook_free(cb);
        chimera_corpus_close(c);
        return rc;
    }
    chimera_build_report rep;
    chimera_status s = chimera_index_build(c, out, &bo, &rep, &err);
    chimera_codebook_free(cb);
    int64_t nt = chimera_corpus_n_tokens(c);
    chimera_corpus_close(c);
    if (s != CHIMERA_OK) return cli_fail("build", &err);
    printf("built %s: %lld tokens, %u clusters, %.1f MiB (%.1f bytes/token), assignment recall %.4f\n",
           out, (long long)nt, rep.n_clusters, rep.index_bytes / 1048576.0,
           (double)rep.index_bytes / (double)nt, rep.assign_recall);
    printf("time:");
    for (int i = 0; i < rep.n_phases; i++) printf(" %s %.2fs", rep.phase[i], rep.seconds[i]);
    printf(" | total %.2fs (with loading %.2fs), peak RSS %.0f MiB\n", rep.total_seconds,
           cli_now() - t0, rep.peak_rss_bytes / 1048576.0);
    print_calibration("calibrated", rep.calibrate_target, rep.n_calibrated, rep.calibrated, 0);
    return 0;
}

static void print_info(const char *dir, const chimera_index_info *in)
{
    printf("index %s (format %u.%u, written by chimera %s)\n", dir, in->format_major,
           in->format_minor, in->library_version);
    printf("  generation     %llu (changes committed: the build, then each add, delete, "
           "update, compact or tune's save)\n", (unsigned long long)in->generation);
    if (in->n_deleted)
        printf("  documents      %lld (%lld deleted, not yet compacted)\n",
               (long long)(in->n_docs - in->n_deleted), (long long)in->n_deleted);
    else
        printf("  documents      %lld (none deleted)\n", (long long)in->n_docs);
    printf("  tokens         %lld (%.1f per document%s)\n", (long long)in->n_tokens,
           in->n_docs ? (double)in->n_tokens / (double)in->n_docs : 0.0,
           in->n_deleted ? ", the deleted ones' counted until compaction" : "");
    printf("  segments       %u (%lld documents, %lld tokens appended since the build or the "
           "last compaction); %u deletion list%s\n", in->n_segments, (long long)in->appended_docs,
           (long long)in->appended_tokens, in->n_deletion_lists, in->n_deletion_lists == 1 ? "" : "s");
    if (in->drift_tokens)
        printf("  drift          %.1f%% of %lld tokens added since the build (counted as they "
               "came, deleted ones too) below its 10th-percentile centroid similarity (%.3f; "
               "the build's own: 10%%)%s\n", 100.0 * in->drift_below,
               (long long)in->drift_tokens, in->assign_sim_p10,
               in->recluster_advised ? ": recluster advised (chimera compact --recluster "
                                       "retrains the centroids, keeping ids and metadata)"
                                     : "");
    if (in->n_docs && in->n_deleted * 5 > in->n_docs)
        printf("  advice         %.0f%% deleted: chimera compact reclaims their space\n",
               100.0 * (double)in->n_deleted / (double)in->n_docs);
    printf("  dim            %u (padded to %u)\n  bits           %u\n", in->dim, in->dim_pad, in->bits);
    printf("  clusters       %u; list sizes min %lld, median %lld, mean %.1f, max %lld; "
           "imbalance %.2f; %u empty\n",
           in->n_clusters, (long long)in->list_min, (long long)in->list_median, in->list_mean,
           (long long)in->list_max, in->list_imbalance, in->list_empty);
    printf("  graph degree   %u\n", in->graph_degree);
    printf("  kernels        %s (this machine; CHIMERA_SIMD caps it)\n", chimera_simd_level());
    printf("  build          seed %s, %d threads, %.2fs, peak RSS %.0f MiB, assignment recall %.4f\n",
           in->seed, in->build_threads, in->build_seconds, in->build_peak_rss / 1048576.0,
           in->assign_recall);
    if (in->n_calibrated)
        print_calibration("defaults", in->calibrate_target, in->n_calibrated, in->calibrated,
                          in->calibration_stale);
    else
        printf("  defaults       the library's (not calibrated at build)\n");
    printf("  source         %s\n",
           in->has_source == 1   ? "recorded (chimera tune computes exact truth from it)"
           : in->has_source == 2 ? "recorded, but documents were added, deleted or updated "
                                   "since: chimera tune needs the documents the index holds "
                                   "now (--tokens/--doclens/--ids)"
                                 : "not recorded");
    printf("  phases        ");
    for (int i = 0; i < in->n_phases; i++) printf(" %s %.2fs", in->phase[i], in->phase_seconds[i]);
    printf("\n  sections       %-14s %-6s %12s  %s\n", "name", "dtype", "bytes", "where");
    for (uint32_t i = 0; i < in->n_sections; i++)
        printf("                 %-14s %-6s %12llu  %s\n", in->sections[i].name,
               in->sections[i].dtype, (unsigned long long)in->sections[i].bytes,
               in->sections[i].device_resident ? "device" : "host");
    double nt = in->n_tokens ? (double)in->n_tokens : 1;
    if (in->rerank != CHIMERA_RERANK_NONE)
        printf("  re-rank        original vectors stored as %s: %.1f MiB (%.1f B/token, %.0f%% "
               "of the index), host-only (search --rerank-depth)\n", chimera_rerank_name(in->rerank),
               in->bytes_rerank / 1048576.0, in->bytes_rerank / nt,
               in->bytes_total ? 100.0 * (double)in->bytes_rerank / (double)in->bytes_total : 0.0);
    else
        printf("  re-rank        none (no original vectors stored; build --rerank f16 adds them)\n");
    printf("  resident       device %.1f MiB (%.1f B/token), host-only %.1f MiB (%.1f B/token), "
           "total %.1f MiB\n",
           in->bytes_device / 1048576.0, in->bytes_device / nt, in->bytes_host / 1048576.0,
           in->bytes_host / nt, in->bytes_total / 1048576.0);
}

/* The tuned profiles (chimera tune), one line each, from the opened index; a line saying
 * why where it does not open (info itself reads only the manifest). */
static void print_profiles(const char *dir)
{
    chimera_error err;
    chimera_index *ix;
    if (chimera_index_open(dir, NULL, &ix, &err) != CHIMERA_OK) {
        printf("  profiles       not read: %s\n", err.msg);
        return;
    }
    int cap = chimera_index_profile_list(ix, NULL, 0), n = 0;
    chimera_profile_entry *e = cap ? malloc((size_t)cap * sizeof *e) : NULL;
    if (e) n = chimera_index_profile_list(ix, e, cap);
    if (n > cap) n = cap;
    if (n == 0)
        printf("  profiles       none (chimera tune stores one; search --recall uses it)\n");
    for (int i = 0; i < n; i++) {
        const chimera_search_params *p = &e[i].params;
        char extra[120];
        cli_extra_flags(p, extra, sizeof extra);
        printf("  %-14s k=%-4u --recall %.3f: --nprobe %u --k-refine %u --k-fullbit %u "
               "--chunks %u%s; held-out Recall@%u %.4f at %.0f queries/s when tuned%s\n",
               i ? "" : "profiles", e[i].k, e[i].target_recall, p->n_probe, p->k_refine,
               p->k_fullbit, p->chunks, extra, e[i].k, e[i].measured_recall, e[i].qps,
               !e[i].reached ? "; target not reached: search --recall never picks it"
               : e[i].stale  ? "; stale (more than a fifth of the documents changed): not used"
                             : "");
    }
    free(e);
    chimera_index_close(ix);
}

/* A sharded index: the layout, then one line per shard (chimera info SHARD for more). */
static int print_layout(const char *dir)
{
    chimera_error err;
    shard_layout l;
    if (shards_read(dir, &l, &err)) return cli_fail("info", &err);
    printf("sharded index %s (generation %llu): %d shards sharing one codebook (%s)\n", dir,
           (unsigned long long)l.generation, l.n_shards, l.codebook);
    printf("  built from     %lld documents, %lld tokens; dim %u, %u clusters, seed %llu\n",
           (long long)l.n_docs, (long long)l.n_tokens, l.dim, l.n_clusters,
           (unsigned long long)l.seed);
    int rc = 0;
    for (int i = 0; i < l.n_shards; i++) {
        chimera_index_info in;
        if (chimera_index_info_read(l.shards[i].dir, &in, &err) != CHIMERA_OK) {
            printf("  shard %-3d      %s: %s\n", i, l.shards[i].dir, err.msg);
            rc = 1;
            continue;
        }
        printf("  shard %-3d      %s: %lld documents (%lld deleted), %lld tokens, generation "
               "%llu, %.1f MiB\n", i, l.shards[i].dir, (long long)(in.n_docs - in.n_deleted),
               (long long)in.n_deleted, (long long)in.n_tokens, (unsigned long long)in.generation,
               in.bytes_total / 1048576.0);
    }
    shards_free(&l);
    return rc;
}

/* info --ids: the ids of the documents a search of the index at dir can return. */
static int print_ids(const char *dir)
{
    chimera_error err;
    chimera_index *ix;
    if (chimera_index_open(dir, NULL, &ix, &err) != CHIMERA_OK) return cli_fail("info", &err);
    int64_t n = chimera_index_ids(ix, NULL, 0);
    int64_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
    if (!ids) {
        chimera_index_close(ix);
        fprintf(stderr, "chimera info: out of memory\n");
        return 1;
    }
    chimera_index_ids(ix, ids, n);
    for (int64_t i = 0; i < n; i++) printf("%lld\n", (long long)ids[i]);
    free(ids);
    chimera_index_close(ix);
    return 0;
}

int cmd_index_info(int argc, char **argv)
{
    const char *pos[1];
    int np = 0, list_ids = 0;
    cli_opt opts[] = {
        {"--ids", OPT_FLAG, &list_ids, "print the ids of the documents a search can return, "
                                       "one per line (opens the index)", 0, 0},
    };
    int r = cli_parse("info", "[IDX] [--ids]", argc, argv, 2, opts, 1, pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    if (np == 0) return cmd_info(argc, argv);
    chimera_error err;
    if (shards_is_layout(pos[0]) && !list_ids) return print_layout(pos[0]);
    if (list_ids && shards_is_layout(pos[0])) { /* every shard's, shard by shard */
        shard_layout l;
        if (shards_read(pos[0], &l, &err)) return cli_fail("info", &err);
        int rc = 0;
        for (int i = 0; i < l.n_shards && rc == 0; i++) rc = print_ids(l.shards[i].dir);
        shards_free(&l);
        return rc;
    }
    if (list_ids) return print_ids(pos[0]);
    chimera_index_info in;
    if (chimera_index_info_read(pos[0], &in, &err) != CHIMERA_OK) return cli_fail("info", &err);
    print_info(pos[0], &in);
    print_profiles(pos[0]);
    return 0;
}

int cmd_check(int argc, char **argv)
{
    const char *pos[1];
    int np = 0;
    cli_opt none[1];
    int r = cli_parse("check", "IDX", argc, argv, 2, none, 0, pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    if (np != 1) {
        fprintf(stderr, "usage: chimera check IDX\n");
        return 2;
    }
    chimera_error err;
    chimera_index *ix;
    double t0 = cli_now();
    if (chimera_index_open(pos[0], NULL, &ix, &err) != CHIMERA_OK) return cli_fail("check", &err);
    chimera_status s = chimera_index_check(ix, &err);
    if (s != CHIMERA_OK) {
        /* the index's path once: some of the library's messages begin with it */
        size_t n = strlen(pos[0]);
        int named = strncmp(err.msg, pos[0], n) == 0 && err.msg[n] == ':';
        fprintf(stderr, "chimera check: %s%s%s\n", named ? "" : pos[0], named ? "" : ": ",
                err.msg);
        chimera_index_close(ix);
        return 1;
    }
    printf("%s: ok (%lld documents; checksums, structure, values and graph verified in %.2fs)\n",
           pos[0], (long long)chimera_index_n_docs(ix), cli_now() - t0);
    chimera_index_close(ix);
    return 0;
}
