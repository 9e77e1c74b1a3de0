/* chimera-mpi build: every rank builds one shard of the corpus; the codebook they share
 * is trained once for all (docs/scaling.md, "Training the shared codebook"):
 *
 *   --train gather     each rank draws its share of the training sample from its own
 *                      documents; rank 0 gathers them and runs the build's k-means
 *   --train allreduce  rank 0 trains on its own share only, then every rank runs Lloyd
 *                      steps over its share, the centroid sums and counts added up by
 *                      MPI_Allreduce (distributed k-means)
 *
 * Every rank maps the input files (a shared file system, or a copy on every machine)
 * but reads only its own documents' tokens (and the sample rows of them). Rank 0 plans
 * the layout and commits its manifest once every shard is built and synced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "../tools/cli.h"
#include "../tools/shards.h"

typedef struct shard_stats {
    double n_docs, n_tokens, bytes, seconds, peak_rss_mib, first_doc;
} shard_stats;

/* The codebook from samples gathered to rank 0. */
static chimera_codebook *train_gather(const float *mine, int64_t n_mine, uint32_t dim,
                                      uint32_t k, int64_t n_total_tokens,
                                      const chimera_build_opts *bo, chimera_error *err, int *ok)
{
    const int size = mpi_world.size, rank = mpi_world.rank;
    MPI_Datatype row;
    MPI_Type_contiguous((int)dim, MPI_FLOAT, &row);
    MPI_Type_commit(&row);
    int cnt = (int)n_mine, *counts = NULL, *displs = NULL;
    float *all = NULL;
    int64_t total = 0;
    if (rank == 0) {
        counts = malloc((size_t)size * sizeof *counts);
        displs = malloc((size_t)size * sizeof *displs);
    }
    MPI_Request req;
    MPI_Igather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "sample sizes");
    if (rank == 0) {
        for (int r = 0; r < size; r++) displs[r] = (int)total, total += counts[r];
        all = malloc((size_t)(total ? total : 1) * dim * sizeof *all);
    }
    MPI_Igatherv(mine, cnt, row, all, counts, displs, row, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "training sample");
    if (rank == 0) mpi_world.bytes_recv += (uint64_t)(total - n_mine) * dim * 4;
    else mpi_world.bytes_sent += (uint64_t)n_mine * dim * 4;
    MPI_Type_free(&row);
    chimera_codebook *cb = NULL;
    if (rank == 0) {
        *ok = chimera_codebook_train_points(all, total, dim, k, n_total_tokens, bo, &cb, err) ==
              CHIMERA_OK;
        if (*ok)
            printf("codebook: %u clusters, k-means on rank 0 over %lld gathered points\n",
                   chimera_codebook_n_clusters(cb), (long long)total);
    }
    free(all);
    free(counts);
    free(displs);
    return cb;
}

/* Lloyd steps over every rank's share, summed by MPI_Allreduce. */
static int refine_allreduce(chimera_codebook *cb, const float *mine, int64_t n_mine, int iters,
                            int n_threads, chimera_error *err)
{
    const uint32_t k = chimera_codebook_n_clusters(cb), d = chimera_codebook_dim(cb);
    double *sums = malloc((size_t)k * d * sizeof *sums);
    int64_t *counts = malloc((size_t)k * sizeof *counts);
    int ok = sums && counts;
    if (!ok) {
        err->code = CHIMERA_ERR_NOMEM;
        strcpy(err->msg, "out of memory");
    }
    if (!mpi_agree("build", ok, err)) {
        free(sums), free(counts);
        return 0;
    }
    for (int it = 0; it < iters; it++) {
        memset(sums, 0, (size_t)k * d * sizeof *sums);
        memset(counts, 0, (size_t)k * sizeof *counts);
        double sim = 0;
        ok = chimera_codebook_accumulate(cb, mine, n_mine, n_threads, sums, counts, &sim, err) ==
             CHIMERA_OK;
        if (!mpi_agree("build", ok, err)) break;
        MPI_Request req[3];
        MPI_Iallreduce(MPI_IN_PLACE, sums, (int)((size_t)k * d), MPI_DOUBLE, MPI_SUM,
                       MPI_COMM_WORLD, &req[0]);
        MPI_Iallreduce(MPI_IN_PLACE, counts, (int)k, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &req[1]);
        MPI_Iallreduce(MPI_IN_PLACE, &sim, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req[2]);
        for (int i = 0; i < 3; i++) mpi_wait(&req[i], "centroid sums");
        uint64_t moved = ((uint64_t)k * d * 8 + (uint64_t)k * 8 + 8);
        mpi_world.bytes_sent += moved;
        mpi_world.bytes_recv += moved;
        chimera_codebook_update(cb, sums, counts);
        int64_t n = 0;
        for (uint32_t c = 0; c < k; c++) n += counts[c];
        if (mpi_world.rank == 0)
            printf("codebook: Lloyd step %d over %lld points on %d ranks: mean similarity %.4f\n",
                   it + 1, (long long)n, mpi_world.size, n ? sim / (double)n : 0.0);
    }
    free(sums), free(counts);
    return ok;
}

int mpi_cmd_build(int argc, char **argv)
{
    const char *tokens = NULL, *doclens = NULL, *ids = NULL, *out = NULL, *clusters = "auto";
    const char *rerank_s = "none", *train = "gather";
    uint32_t bits = 4, degree = 0, threads = 0, iters = 4;
    int64_t seed = 0;
    int allow_empty = 0, no_sync = 0, no_calibrate = 0;
    cli_opt opts[] = {
        {"--tokens", OPT_STR, &tokens, "token matrix .npy [n_tokens, dim] (every rank reads it)", 1, 0},
        {"--doclens", OPT_STR, &doclens, "document lengths .npy [n_docs] (int32/64)", 1, 0},
        {"--ids", OPT_STR, &ids, "document ids (.npy int64 or text, one per line)", 0, 0},
        {"--out", OPT_STR, &out, "sharded index directory (one shard per rank)", 1, 0},
        {"--bits", OPT_U32, &bits, "bits per dimension of the full codes, 1..8 (default 4)", 0, 0},
        {"--clusters", OPT_STR, &clusters, "IVF clusters, or auto (~1 per 100 tokens)", 0, 0},
        {"--graph-degree", OPT_U32, &degree, "centroid graph out-degree (default 32)", 0, 0},
        {"--threads", OPT_THREADS, &threads, "worker threads per rank (default: all CPUs)", 0, 0},
        {"--seed", OPT_I64, &seed, "random seed (default 0)", 0, 0},
        {"--train", OPT_STR, &train,
         "gather (sample to rank 0, k-means there; default) or allreduce (distributed Lloyd)", 0, 0},
        {"--train-iters", OPT_U32, &iters, "allreduce: distributed Lloyd steps (default 4)", 0, 0},
        {"--allow-empty", OPT_FLAG, &allow_empty, "accept empty documents (never returned)", 0, 0},
        {"--no-sync", OPT_FLAG, &no_sync, "skip fsyncs (scratch indexes)", 0, 0},
        {"--rerank", OPT_STR, &rerank_s, "also store the vectors: f16, bf16 or f32", 0, 0},
        {"--no-calibrate", OPT_FLAG, &no_calibrate, "skip calibrating default parameters", 0, 0},
    };
    int r = cli_parse("build", "--tokens T.npy --doclens L.npy --out DIR [--train gather]", argc,
                      argv, 2, opts, sizeof opts / sizeof opts[0], NULL, 0, NULL);
    if (r) return r < 0 ? 2 : 0;
    const int rank = mpi_world.rank, size = mpi_world.size;
    chimera_build_opts bo = {.bits = bits, .graph_degree = degree, .n_threads = (int)threads,
                             .seed = (uint64_t)seed, .no_sync = no_sync,
                             .no_calibrate = no_calibrate,
                             .progress = rank == 0 ? cli_progress : NULL};
    int gather = strcmp(train, "gather") == 0;
    if (!gather && strcmp(train, "allreduce") != 0) {
        if (rank == 0) fprintf(stderr, "chimera-mpi build: --train must be gather or allreduce\n");
        return 2;
    }
    if (cli_build_choices("build", clusters, rerank_s, &bo)) return 2;
    double t0 = MPI_Wtime();
    chimera_error err = {0};
    chimera_corpus *c = NULL, *part = NULL;
    chimera_codebook *cb = NULL;
    shard_layout plan = {0};
    float *sample = NULL;
    char *shard_dir = NULL;
    int rc = 1, ok;
    /* every rank opens the corpus without scanning it, then checks its own part */
    chimera_corpus_opts co = {.allow_empty = allow_empty, .skip_value_check = 1};
    ok = chimera_corpus_open(tokens, doclens, ids, &co, &c, &err) == CHIMERA_OK;
    if (ok && chimera_corpus_n_docs(c) < size) {
        ok = 0;
        snprintf(err.msg, sizeof err.msg, "%lld documents for %d ranks (every shard needs one)",
                 (long long)chimera_corpus_n_docs(c), size);
    }
    if (!mpi_agree("build", ok, &err)) goto done;
    /* rank 0 plans the layout (and holds its writer lock) */
    uint64_t gen = 0;
    if (rank == 0) {
        ok = !shards_plan(out, size, &plan, &err);
        gen = plan.generation;
    }
    if (!mpi_agree("build", ok, &err)) goto done;
    MPI_Request req;
    MPI_Ibcast(&gen, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "layout");
    int64_t *bounds = malloc(((size_t)size + 1) * sizeof *bounds);
    ok = bounds != NULL;
    if (ok) {
        shards_split(c, size, bounds);
        ok = chimera_corpus_slice(c, bounds[rank], bounds[rank + 1] - bounds[rank], 1, &part,
                                  &err) == CHIMERA_OK;
    }
    int64_t first_doc = ok ? bounds[rank] : 0;
    free(bounds);
    if (!mpi_agree("build", ok, &err)) goto done;

    /* the training sample: this rank's share of what a single build would draw */
    const int64_t nt = chimera_corpus_n_tokens(c);
    const uint32_t dim = chimera_corpus_dim(c);
    const uint32_t k = bo.n_clusters ? bo.n_clusters : chimera_default_n_clusters(nt);
    const int64_t n_train = chimera_codebook_sample_size(k, nt);
    const int64_t my_tokens = chimera_corpus_n_tokens(part);
    int64_t n_mine = (int64_t)((double)n_train * (double)my_tokens / (double)nt + 0.5);
    if (n_mine > my_tokens) n_mine = my_tokens;
    double t_train = MPI_Wtime();
    sample = malloc((size_t)(n_mine ? n_mine : 1) * dim * sizeof *sample);
    ok = sample && chimera_corpus_sample_tokens(part, n_mine, bo.seed, 1 + (uint64_t)rank, sample,
                                                &err) == CHIMERA_OK;
    if (!mpi_agree("build", ok, &err)) goto done;
    ok = 1;
    if (gather) {
        cb = train_gather(sample, n_mine, dim, k, nt, &bo, &err, &ok);
    } else if (rank == 0) {
        /* the start: k-means on rank 0's share (at least one point per centroid) */
        ok = chimera_codebook_train_points(sample, n_mine, dim, k, nt, &bo, &cb, &err) == CHIMERA_OK;
    }
    if (!mpi_agree("build", ok, &err)) goto done;
    /* every rank gets the codebook */
    void *bytes = NULL;
    size_t nbytes = 0;
    if (rank == 0) ok = chimera_codebook_to_bytes(cb, &bytes, &nbytes, &err) == CHIMERA_OK;
    if (!mpi_agree("build", ok, &err)) goto done;
    uint64_t nb64 = nbytes;
    MPI_Ibcast(&nb64, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "codebook size");
    if (rank != 0) bytes = malloc((size_t)nb64);
    ok = bytes != NULL;
    if (!mpi_agree("build", ok, &err)) goto done;
    mpi_bcast_bytes(bytes, (size_t)nb64, "codebook");
    if (rank != 0) ok = chimera_codebook_from_bytes(bytes, (size_t)nb64, &cb, &err) == CHIMERA_OK;
    if (rank == 0) chimera_free(bytes);
    else free(bytes);
    if (!mpi_agree("build", ok, &err)) goto done;
    if (!gather && !refine_allreduce(cb, sample, n_mine, (int)iters, (int)threads, &err)) goto done;
    free(sample);
    sample = NULL;
    t_train = MPI_Wtime() - t_train;
    if (rank == 0) {
        ok = chimera_codebook_save(cb, plan.codebook, &err) == CHIMERA_OK;
        printf("codebook: %u clusters (--train %s) in %.2fs\n", k, train, t_train);
    }
    if (!mpi_agree("build", ok, &err)) goto done;

    /* this rank's shard */
    bo.codebook = cb;
    bo.n_clusters = 0;
    shard_dir = shards_shard_path(out, gen, rank);
    chimera_build_report rep = {0};
    double t_shard = MPI_Wtime();
    ok = shard_dir && chimera_index_build(part, shard_dir, &bo, &rep, &err) == CHIMERA_OK;
    shard_stats st = {(double)chimera_corpus_n_docs(part), (double)my_tokens,
                      (double)rep.index_bytes, MPI_Wtime() - t_shard,
                      rep.peak_rss_bytes / 1048576.0, (double)first_doc};
    if (!mpi_agree("build", ok, &err)) {
        if (rank == 0) shards_abandon(out, &plan);
        goto done;
    }
    shard_stats *all = rank == 0 ? malloc((size_t)size * sizeof *all) : NULL;
    MPI_Igather(&st, 6, MPI_DOUBLE, all, 6, MPI_DOUBLE, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "shard reports");
    if (rank == 0) {
        double max_rss = 0;
        for (int i = 0; i < size; i++) {
            plan.shards[i].first_doc = (int64_t)all[i].first_doc;
            plan.shards[i].n_docs = (int64_t)all[i].n_docs;
            plan.shards[i].n_tokens = (int64_t)all[i].n_tokens;
            if (all[i].peak_rss_mib > max_rss) max_rss = all[i].peak_rss_mib;
            printf("shard %d (rank %d): %lld documents, %lld tokens, %.1f MiB, %.2fs\n", i, i,
                   (long long)all[i].n_docs, (long long)all[i].n_tokens, all[i].bytes / 1048576.0,
                   all[i].seconds);
        }
        plan.dim = dim;
        plan.n_clusters = k;
        plan.seed = chimera_codebook_seed(cb);
        plan.n_docs = chimera_corpus_n_docs(c);
        plan.n_tokens = nt;
        ok = !shards_commit(out, &plan, &err);
        if (ok)
            printf("built %s: %d shards on %d ranks, %lld documents, %lld tokens (generation %llu) "
                   "in %.2fs; peak RSS per rank up to %.0f MiB\n", out, size, size,
                   (long long)plan.n_docs, (long long)nt, (unsigned long long)gen,
                   MPI_Wtime() - t0, max_rss);
        else
            shards_abandon(out, &plan);
    }
    free(all);
    rc = mpi_agree("build", ok, &err) ? 0 : 1;
done:
    free(sample);
    free(shard_dir);
    chimera_codebook_free(cb);
    chimera_corpus_close(part);
    chimera_corpus_close(c);
    shards_free(&plan);
    return rc;
}
