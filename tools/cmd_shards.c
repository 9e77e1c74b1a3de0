/* chimera build --shards N: one corpus cut into N shard indexes that share a codebook
 * (shards.h), in one process, for users without MPI (chimera-mpi build makes the same
 * layout with one process per shard). */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "shards.h"

int build_sharded(const char *out, int n_shards, const chimera_corpus *c,
                  const chimera_build_opts *opts)
{
    chimera_error err;
    const int64_t nd = chimera_corpus_n_docs(c), nt = chimera_corpus_n_tokens(c);
    if (n_shards > nd) {
        fprintf(stderr, "chimera build: --shards %d for %lld documents (every shard needs one)\n",
                n_shards, (long long)nd);
        return 2;
    }
    if (opts->codebook) {
        fprintf(stderr, "chimera build: --shards trains the shards' codebook itself; "
                        "--codebook is for a single index\n");
        return 2;
    }
    double t0 = cli_now();
    shard_layout l;
    if (shards_plan(out, n_shards, &l, &err)) return cli_fail("build", &err);
    int rc = 1;
    int64_t *bounds = malloc(((size_t)n_shards + 1) * sizeof *bounds);
    chimera_codebook *cb = NULL;
    if (!bounds) goto done;
    /* the codebook a single build of the whole corpus would train */
    if (chimera_codebook_train(c, opts, &cb, &err) != CHIMERA_OK ||
        chimera_codebook_save(cb, l.codebook, &err) != CHIMERA_OK) {
        rc = cli_fail("build", &err);
        goto done;
    }
    double t_train = cli_now() - t0;
    printf("codebook: %u clusters trained on the whole corpus in %.2fs\n",
           chimera_codebook_n_clusters(cb), t_train);
    shards_split(c, n_shards, bounds);
    chimera_build_opts bo = *opts;
    bo.codebook = cb;
    bo.n_clusters = 0;
    for (int i = 0; i < n_shards; i++) {
        chimera_corpus *part = NULL;
        chimera_build_report rep;
        if (chimera_corpus_slice(c, bounds[i], bounds[i + 1] - bounds[i], 0, &part, &err) !=
                CHIMERA_OK ||
            chimera_index_build(part, l.shards[i].dir, &bo, &rep, &err) != CHIMERA_OK) {
            chimera_corpus_close(part);
            rc = cli_fail("build", &err);
            goto done;
        }
        l.shards[i].first_doc = bounds[i];
        l.shards[i].n_docs = chimera_corpus_n_docs(part);
        l.shards[i].n_tokens = chimera_corpus_n_tokens(part);
        chimera_corpus_close(part);
        printf("shard %d: documents %lld..%lld, %lld tokens, %.1f MiB, %.2fs\n", i,
               (long long)bounds[i], (long long)bounds[i + 1] - 1, (long long)l.shards[i].n_tokens,
               rep.index_bytes / 1048576.0, rep.total_seconds);
    }
    l.dim = chimera_corpus_dim(c);
    l.n_clusters = chimera_codebook_n_clusters(cb);
    l.seed = chimera_codebook_seed(cb);
    l.n_docs = nd;
    l.n_tokens = nt;
    if (shards_commit(out, &l, &err)) {
        rc = cli_fail("build", &err);
        goto done;
    }
    printf("built %s: %d shards, %lld documents, %lld tokens (generation %llu) in %.2fs, peak "
           "RSS %.0f MiB\n", out, n_shards, (long long)nd, (long long)nt,
           (unsigned long long)l.generation, cli_now() - t0, cli_peak_rss_mib());
    rc = 0;
done:
    if (rc) shards_abandon(out, &l);
    if (rc == 1 && !bounds) fprintf(stderr, "chimera build: out of memory\n");
    chimera_codebook_free(cb);
    free(bounds);
    shards_free(&l);
    return rc;
}
