/* chimera-mpi search: rank 0 reads the queries and broadcasts them in batches; every
 * rank searches its shards (shard s belongs to rank s mod ranks) to a local top k; rank
 * 0 gathers the lists, merges them and writes the same TREC run as chimera search.
 *
 * On the wire, per batch of n queries with T tokens in all: a header (n, T), the query
 * lengths (8n bytes) and tokens (4 T dim bytes) from rank 0 to every other rank, and
 * back from each k ids and scores per query (12 k n bytes). --profile prints these per
 * query. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "../tools/cli.h"
#include "../tools/shards.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(const double *sorted, int64_t n, double p)
{
    int64_t i = (int64_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* The query tokens and lengths of queries [q0, q0 + n) in one buffer. */
typedef struct batch_msg {
    int64_t n, total;   /* queries, tokens */
    int64_t *qlens;
    float *tokens;
} batch_msg;

/* rank 0: queries [q0, q0 + n) of q as a message */
static int batch_pack(const chimera_queries *q, const float *all_tokens, const int64_t *offs,
                      int64_t q0, int64_t n, batch_msg *m)
{
    uint32_t dim = chimera_queries_dim(q);
    m->n = n;
    m->total = offs[q0 + n] - offs[q0];
    m->qlens = malloc((size_t)(n ? n : 1) * sizeof *m->qlens);
    if (!m->qlens) return 0;
    for (int64_t i = 0; i < n; i++) m->qlens[i] = chimera_queries_len(q, q0 + i);
    m->tokens = (float *)all_tokens + (size_t)offs[q0] * dim; /* borrowed */
    return 1;
}

/* Every rank: the batch rank 0 sends (n = 0: the end). */
static int batch_bcast(batch_msg *m, uint32_t dim)
{
    int64_t hdr[2] = {m->n, m->total};
    MPI_Request req;
    MPI_Ibcast(hdr, 2, MPI_INT64_T, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "query batch header");
    if (mpi_world.rank == 0) mpi_world.bytes_sent += 16u * (uint64_t)(mpi_world.size - 1);
    else mpi_world.bytes_recv += 16;
    if (mpi_world.rank != 0) {
        m->n = hdr[0];
        m->total = hdr[1];
        if (m->n == 0) return 1;
        m->qlens = malloc((size_t)m->n * sizeof *m->qlens);
        m->tokens = malloc((size_t)m->total * dim * sizeof *m->tokens);
        if (!m->qlens || !m->tokens) return 0;
    }
    mpi_bcast_bytes(m->qlens, (size_t)m->n * sizeof *m->qlens, "query lengths");
    mpi_bcast_bytes(m->tokens, (size_t)m->total * dim * sizeof *m->tokens, "query tokens");
    return 1;
}

typedef struct search_run {
    shard_set set;
    uint32_t k, dim;
    chimera_search_params sp;
    chimera_search_opts so;
    chimera_search_profile prof; /* this rank's, summed over batches */
    /* rank 0, summed over batches: broadcasting the queries, its own shards' search,
     * waiting for the other ranks' lists, merging them */
    double t_bcast, t_local, t_gather, t_merge;
} search_run;

/* Searches one broadcast batch on this rank's shards and merges all ranks' lists on
 * rank 0 into ids/scores (rank 0 only). */
static int run_batch(search_run *run, const batch_msg *m, int64_t *ids, float *scores,
                     chimera_error *err)
{
    const int size = mpi_world.size, rank = mpi_world.rank;
    const uint32_t k = run->k;
    const int64_t n = m->n;
    int64_t *mine_ids = malloc((size_t)n * k * sizeof *mine_ids);
    float *mine_sc = malloc((size_t)n * k * sizeof *mine_sc);
    int64_t *all_ids = NULL;
    float *all_sc = NULL;
    if (rank == 0) {
        all_ids = malloc((size_t)size * n * k * sizeof *all_ids);
        all_sc = malloc((size_t)size * n * k * sizeof *all_sc);
    }
    chimera_queries *q = NULL;
    int ok = mine_ids && mine_sc && (rank != 0 || (all_ids && all_sc));
    if (!ok) {
        err->code = CHIMERA_ERR_NOMEM;
        strcpy(err->msg, "out of memory");
    }
    if (ok) ok = chimera_queries_new(m->tokens, n, run->dim, m->qlens, 0, &q, err) == CHIMERA_OK;
    chimera_search_profile p = {0};
    double t0 = MPI_Wtime();
    if (ok)
        ok = shard_set_search(&run->set, q, k, &run->sp, &run->so, mine_ids, mine_sc, &p, err) ==
             CHIMERA_OK;
    run->t_local += MPI_Wtime() - t0;
    chimera_queries_free(q);
    if (ok) {
        shard_profile_add(&run->prof, &p);
    }
    if (mpi_agree("search", ok, err)) {
        double tg = MPI_Wtime();
        MPI_Request req[2];
        MPI_Igather(mine_ids, (int)(n * k), MPI_INT64_T, all_ids, (int)(n * k), MPI_INT64_T, 0,
                    MPI_COMM_WORLD, &req[0]);
        MPI_Igather(mine_sc, (int)(n * k), MPI_FLOAT, all_sc, (int)(n * k), MPI_FLOAT, 0,
                    MPI_COMM_WORLD, &req[1]);
        mpi_wait(&req[0], "result ids");
        mpi_wait(&req[1], "result scores");
        double tm = MPI_Wtime();
        run->t_gather += tm - tg;
        uint64_t b = (uint64_t)n * k * 12;
        if (rank == 0) mpi_world.bytes_recv += b * (uint64_t)(size - 1);
        else mpi_world.bytes_sent += b;
        if (rank == 0 && shards_merge_all(size, n, k, all_ids, all_sc, ids, scores) != 0) {
            ok = 0;
            fprintf(stderr, "chimera-mpi search: out of memory\n");
        }
        if (rank == 0) run->t_merge += MPI_Wtime() - tm;
    } else {
        ok = 0;
    }
    free(mine_ids), free(mine_sc), free(all_ids), free(all_sc);
    return ok;
}

int mpi_cmd_search(int argc, char **argv)
{
    const char *queries = NULL, *qlens = NULL, *out = NULL, *backend = NULL;
    const char *impute_s = NULL, *probe_s = NULL;
    uint32_t k = 10, threads = 0;
    int64_t batch = 0;
    int latency = 0, profile = 0;
    double timeout = 60, impute_scale = 0;
    search_run run = {0};
    chimera_search_params *sp = &run.sp;
    cli_opt opts[] = {
        {"--queries", OPT_STR, &queries, "queries .npy (read by rank 0)", 1, 0},
        {"--qlens", OPT_STR, &qlens, "query lengths .npy, for [total, dim] queries", 0, 0},
        {"-k", OPT_U32, &k, "results per query (default 10)", 0, 0},
        {"--out", OPT_STR, &out, "output TREC run (written by rank 0)", 0, 0},
        {"--nprobe", OPT_U32, &sp->n_probe, "clusters probed per query token", 0, 0},
        {"--k-refine", OPT_U32, &sp->k_refine, "documents kept by refinement, per shard", 0, 0},
        {"--k-fullbit", OPT_U32, &sp->k_fullbit, "documents re-scored at full precision, per shard", 0, 0},
        {"--chunks", OPT_U32, &sp->chunks, "document-scoring chunks", 0, 0},
        {"--rerank-depth", OPT_U32, &sp->rerank_depth, "exact re-rank depth (build --rerank)", 0, 0},
        {"--impute", OPT_STR, &impute_s, "refinement floor: probe (default), zero, min", 0, 0},
        {"--impute-scale", OPT_F64, &impute_scale,
         "the probe floor's scale in (0, 1] (default: each shard's calibrated scale)", 0, 0},
        {"--probe", OPT_STR, &probe_s, "centroid search: auto (default), brute, graph", 0, 0},
        {"--threads", OPT_THREADS, &threads, "threads per rank (default: all CPUs)", 0, 0},
        {"--batch", OPT_I64, &batch, "queries per broadcast (default: all)", 0, 0},
        {"--latency", OPT_FLAG, &latency, "one query at a time, all threads of every rank", 0, 0},
        {"--backend", OPT_STR, &backend, "cpu, cuda or auto (default)", 0, 0},
        {"--profile", OPT_FLAG, &profile, "print per-stage times and bytes on the wire", 0, 0},
        {"--timeout", OPT_F64, &timeout, "seconds a rank may take before the job is aborted "
                                         "(default 60)", 0, 0},
    };
    const char *pos[1];
    int np = 0;
    int r = cli_parse("search", "DIR --queries Q.npy [-k K] [--out run.trec] [--nprobe N ...]",
                      argc, argv, 2, opts, sizeof opts / sizeof opts[0], pos, 1, &np);
    if (r) return r < 0 ? 2 : 0;
    const int rank = mpi_world.rank, size = mpi_world.size;
    if (np != 1 || k == 0 || timeout <= 0) {
        if (rank == 0)
            fprintf(stderr, "chimera-mpi search: give the sharded index directory, -k >= 1 and "
                            "--timeout > 0\n");
        return 2;
    }
    mpi_world.timeout = timeout;
    if ((impute_s && chimera_impute_parse(impute_s, &sp->impute) != CHIMERA_OK) ||
        (probe_s && chimera_probe_parse(probe_s, &sp->probe) != CHIMERA_OK) ||
        !(impute_scale >= 0 && impute_scale <= 1) ||
        cli_backend("search", backend, &run.so.backend)) {
        if (rank == 0)
            fprintf(stderr, "chimera-mpi search: bad --impute, --impute-scale (0, 1], --probe or "
                            "--backend\n");
        return 2;
    }
    sp->impute_scale = (float)impute_scale;
    run.k = k;
    run.so.n_threads = (int)threads;
    run.so.latency_mode = latency;
    chimera_error err = {0};
    chimera_queries *q = NULL;
    int64_t *ids = NULL, *offs = NULL;
    float *scores = NULL, *qtok = NULL; /* qtok: the set's own tokens (not freed) */
    double *lat = NULL;
    int rc = 1;
    /* every rank opens its shards; rank 0 also reads the queries */
    int ok = !shard_set_open(pos[0], size, rank, &run.set, &err);
    if (ok && rank == 0) ok = chimera_queries_read(queries, qlens, &q, &err) == CHIMERA_OK;
    if (ok && rank == 0 && chimera_queries_dim(q) != run.set.layout.dim) {
        ok = 0;
        err.code = CHIMERA_ERR_DIM;
        snprintf(err.msg, sizeof err.msg, "%s: queries of dimension %u, the index's is %u",
                 queries, chimera_queries_dim(q), run.set.layout.dim);
    }
    if (!mpi_agree("search", ok, &err)) goto done;
    run.dim = run.set.layout.dim;
    /* one setting for every shard: shard 0's calibrated defaults (rank 0 holds shard 0),
     * flags over them, so that any number of ranks gives the same answers */
    int calibrated = 0;
    if (rank == 0 && run.set.n_open) {
        calibrated = chimera_index_params_default(run.set.ix[0], k, sp);
        if (sp->k_fullbit < sp->rerank_depth) sp->k_fullbit = sp->rerank_depth;
        if (sp->k_refine < sp->k_fullbit) sp->k_refine = sp->k_fullbit;
    }
    MPI_Request req;
    MPI_Ibcast(sp, (int)sizeof *sp, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "search parameters");

    int64_t nq = 0;
    if (rank == 0) {
        nq = chimera_queries_count(q);
        ids = malloc((size_t)nq * k * sizeof *ids);
        scores = malloc((size_t)nq * k * sizeof *scores);
        lat = malloc((size_t)nq * sizeof *lat);
        offs = malloc(((size_t)nq + 1) * sizeof *offs);
        ok = ids && scores && lat && offs;
        if (ok) {
            offs[0] = 0;
            for (int64_t i = 0; i < nq; i++) offs[i + 1] = offs[i] + chimera_queries_len(q, i);
            qtok = (float *)chimera_queries_tokens(q, 0); /* all of them, back to back */
        } else {
            strcpy(err.msg, "out of memory");
        }
    }
    if (!mpi_agree("search", ok, &err)) goto done;
    if (rank != 0) {
        /* the other ranks answer batches until rank 0 sends the empty one */
        for (;;) {
            batch_msg m = {0};
            ok = batch_bcast(&m, run.dim);
            if (ok && m.n == 0) break;
            ok = ok && run_batch(&run, &m, NULL, NULL, &err);
            free(m.qlens), free(m.tokens);
            if (!ok) goto done;
        }
    } else {
        /* a warm-up batch first, as chimera search does, then the timed ones */
        int64_t nw = nq < 8 ? nq : 8;
        if (latency) batch = 1;
        if (batch <= 0 || batch > nq) batch = nq;
        uint64_t sent0 = 0, recv0 = 0;
        double t0 = 0;
        for (int64_t b0 = -nw; b0 < nq; ) {
            int warm = b0 < 0;
            int64_t s0 = warm ? 0 : b0, n = warm ? nw : (nq - b0 < batch ? nq - b0 : batch);
            if (!warm && b0 == 0) {
                t0 = MPI_Wtime();
                sent0 = mpi_world.bytes_sent, recv0 = mpi_world.bytes_recv;
                memset(&run.prof, 0, sizeof run.prof);
                run.t_bcast = run.t_local = run.t_gather = run.t_merge = 0;
            }
            batch_msg m = {0};
            double tb = MPI_Wtime();
            ok = batch_pack(q, qtok, offs, s0, n, &m) && batch_bcast(&m, run.dim);
            run.t_bcast += MPI_Wtime() - tb;
            ok = ok && run_batch(&run, &m, ids + s0 * k, scores + s0 * k, &err);
            free(m.qlens);
            if (!ok) goto done;
            tb = MPI_Wtime() - tb;
            for (int64_t i = 0; i < n && !warm; i++) lat[s0 + i] = tb;
            b0 = warm ? 0 : b0 + n;
        }
        double el = MPI_Wtime() - t0;
        batch_msg end = {0};
        batch_bcast(&end, run.dim);
        uint64_t sent = mpi_world.bytes_sent - sent0, recv = mpi_world.bytes_recv - recv0;
        if (out && chimera_results_write(out, nq, k, ids, scores, "chimera", &err) != CHIMERA_OK) {
            cli_fail("search", &err);
            goto done;
        }
        qsort(lat, (size_t)nq, sizeof *lat, cmp_double);
        double mean = 0;
        for (int64_t i = 0; i < nq; i++) mean += lat[i];
        mean /= (double)(nq ? nq : 1);
        char rr[32] = "";
        if (sp->rerank_depth) snprintf(rr, sizeof rr, " rerank_depth=%u", sp->rerank_depth);
        printf("search: %lld queries, k=%u, n_probe=%u k_refine=%u k_fullbit=%u chunks=%u%s, "
               "%d shards on %d ranks, %s backend, %s mode: %.3fs, %.1f queries/s; %s ms mean "
               "%.2f p50 %.2f p95 %.2f p99 %.2f\n",
               (long long)nq, k, sp->n_probe, sp->k_refine, sp->k_fullbit, sp->chunks, rr,
               run.set.layout.n_shards, size, run.prof.backend[0] ? run.prof.backend : "no",
               latency ? "latency" : "throughput", el, (double)nq / el,
               latency ? "latency" : "batch time", 1e3 * mean, 1e3 * pct(lat, nq, 0.50),
               1e3 * pct(lat, nq, 0.95), 1e3 * pct(lat, nq, 0.99));
        if (profile) {
            double n = (double)(nq ? nq : 1);
            printf("parameters: %s, flags over them, the same on every shard\n",
                   calibrated ? "shard 0's calibrated defaults for this k" : "the library's defaults");
            const chimera_search_profile *pr = &run.prof;
            printf("rank 0's shards (per query): generate %.3f ms, refine %.3f ms, centroid "
                   "interaction %.3f ms, 1-bit scoring %.3f ms, full-bit %.3f ms, re-rank %.3f "
                   "ms; %.0f posting entries, %.0f documents touched, %.0f refined, %.0f 1-bit "
                   "scored, %.1f full-bit scored, %.0f re-ranked, %.0f centroid-score rows "
                   "computed one by one, %.1f clusters probed per query token (%.1f by a "
                   "graph walk)\n",
                   1e3 * pr->t_generate / n, 1e3 * pr->t_refine / n, 1e3 * pr->t_interaction / n,
                   1e3 * pr->t_score1 / n, 1e3 * pr->t_fullbit / n, 1e3 * pr->t_rerank / n,
                   pr->tokens_refined / n, pr->docs_touched / n, pr->n_refined / n,
                   pr->n_scored1 / n, pr->n_fullbit / n, pr->n_reranked / n, pr->n_rows / n,
                   pr->n_probed / n, pr->n_walked / n);
            printf("rank 0 (per query): broadcast %.3f ms, own shards %.3f ms, waiting for the "
                   "other ranks' lists %.3f ms, merge %.4f ms\n", 1e3 * run.t_bcast / n,
                   1e3 * run.t_local / n, 1e3 * run.t_gather / n, 1e3 * run.t_merge / n);
            printf("network (per query, rank 0): %.1f KiB sent (query tokens to %d ranks), %.1f "
                   "KiB received (%u ids and scores from each); %.0f bytes in all\n",
                   sent / n / 1024.0, size - 1, recv / n / 1024.0, k, (sent + recv) / n);
        }
    }
    rc = 0;
done:
    free(ids), free(scores), free(lat), free(offs);
    chimera_queries_free(q);
    shard_set_close(&run.set);
    return rc;
}
