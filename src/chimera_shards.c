/* The public API of shards (chimera.h, "Shards"): corpus slices and the codebook that
 * the shards of one corpus share. Thin: the work is in data/corpus.c and
 * index/codebook.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chimera.h"
#include "chimera_impl.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/pool.h"
#include "core/progress.h"
#include "index/index.h"
#include "core/alloc.h"

chimera_status chimera_corpus_slice(const chimera_corpus *corpus, int64_t doc_start,
                                    int64_t n_docs, int check_values, chimera_corpus **out,
                                    chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "corpus_slice: out is NULL");
    *out = NULL;
    if (!corpus) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "corpus_slice: corpus is NULL");
    chimera_corpus *h = cm_calloc(1, sizeof *h);
    if (!h) return cm_fail(err, CHIMERA_ERR_NOMEM, "corpus: out of memory");
    chimera_status s = data_corpus_slice(&h->c, &corpus->c, doc_start, n_docs, check_values, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

int64_t chimera_corpus_doc_start(const chimera_corpus *corpus, int64_t doc)
{
    if (!corpus || doc < 0 || doc > corpus->c.n_docs) return -1;
    return corpus->c.doc_off[doc];
}

uint32_t chimera_default_n_clusters(int64_t n_tokens)
{
    return n_tokens > 0 ? ix_auto_clusters(n_tokens) : 0;
}

int64_t chimera_codebook_sample_size(uint32_t n_clusters, int64_t n_tokens)
{
    return n_tokens > 0 ? ix_codebook_sample_size(n_clusters, n_tokens) : 0;
}

chimera_status chimera_corpus_sample_tokens(const chimera_corpus *corpus, int64_t n,
                                            uint64_t seed, uint64_t stream, float *out,
                                            chimera_error *err)
{
    if (!corpus || (!out && n))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "sample_tokens: corpus and out are required");
    return ix_codebook_sample(&corpus->c, n, seed, stream, out, err);
}

static chimera_status codebook_alloc(chimera_codebook **out, chimera_error *err)
{
    *out = cm_calloc(1, sizeof **out);
    return *out ? CHIMERA_OK : cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
}

/* Trains on points with the options' seed, threads, progress and cancel. */
static chimera_status train(const float *x, int64_t n, uint32_t d, uint32_t k,
                            const chimera_build_opts *opts, chimera_codebook **out,
                            chimera_error *err)
{
    chimera_build_opts o = {0};
    if (opts) o = *opts;
    if (o.n_threads < 0 || o.n_threads > CHIMERA_MAX_THREADS)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook: %d threads, expected 0..%d",
                       o.n_threads, CHIMERA_MAX_THREADS);
    if (k == 0 || (int64_t)k > n)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "codebook: %u clusters from %lld training points (at least one each)", k,
                       (long long)n);
    cm_pool *pool = cm_pool_new(o.n_threads);
    chimera_codebook *h = NULL;
    chimera_status s = codebook_alloc(&h, err);
    if (s == CHIMERA_OK && !pool) s = cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    if (s == CHIMERA_OK) {
        cm_watch w;
        cm_watch_init(&w, o.progress, o.progress_user, o.cancel, o.cancel_user);
        s = ix_codebook_train(x, n, d, k, o.seed, pool, (o.progress || o.cancel) ?
                              cm_watch_progress : NULL, &w, &w, &h->cb, err);
        if (s == CHIMERA_OK && cm_watch_flag(&w))
            s = cm_fail(err, CHIMERA_ERR_CANCELLED, "codebook: cancelled");
    }
    cm_pool_free(pool);
    if (s != CHIMERA_OK) {
        chimera_codebook_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

chimera_status chimera_codebook_train(const chimera_corpus *corpus,
                                      const chimera_build_opts *opts, chimera_codebook **out,
                                      chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_train: out is NULL");
    *out = NULL;
    if (!corpus) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_train: corpus is NULL");
    const data_corpus *c = &corpus->c;
    uint32_t k = opts && opts->n_clusters ? opts->n_clusters : ix_auto_clusters(c->n_tokens);
    uint64_t seed = opts ? opts->seed : 0;
    int64_t n = ix_codebook_sample_size(k, c->n_tokens);
    float *x = cm_aligned_alloc(64, (size_t)(n ? n : 1) * c->dim * sizeof(float));
    if (!x) return cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    chimera_status s = ix_codebook_sample(c, n, seed, 0, x, err);
    if (s == CHIMERA_OK) s = train(x, n, c->dim, k, opts, out, err);
    cm_free(x);
    return s;
}

chimera_status chimera_codebook_train_points(const float *points, int64_t n, uint32_t dim,
                                             uint32_t n_clusters, int64_t n_tokens_total,
                                             const chimera_build_opts *opts,
                                             chimera_codebook **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_train: out is NULL");
    *out = NULL;
    if (!points || n < 1 || dim == 0 || dim > 4096)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "codebook_train: points [%lld x %u]: need at least one, 1 <= dim <= 4096",
                       (long long)n, dim);
    for (size_t i = 0; i < (size_t)n * dim; i++)
        if (!(points[i] - points[i] == 0.0f))
            return cm_fail(err, CHIMERA_ERR_VALUE,
                           "codebook_train: point %zu, column %zu is NaN or infinite", i / dim,
                           i % dim);
    uint32_t k = n_clusters ? n_clusters
                            : ix_auto_clusters(n_tokens_total > n ? n_tokens_total : n);
    return train(points, n, dim, k, opts, out, err);
}

chimera_status chimera_codebook_accumulate(const chimera_codebook *cb, const float *points,
                                           int64_t n, int n_threads, double *sums,
                                           int64_t *counts, double *similarity,
                                           chimera_error *err)
{
    if (!cb || !sums || !counts || (n && !points) || n < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "codebook_accumulate: codebook, sums and counts are required");
    if (n_threads < 0 || n_threads > CHIMERA_MAX_THREADS)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "codebook_accumulate: %d threads, expected 0..%d", n_threads,
                       CHIMERA_MAX_THREADS);
    if (n == 0) return CHIMERA_OK;
    cm_pool *pool = cm_pool_new(n_threads);
    if (!pool) return cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    chimera_status s = ix_codebook_accumulate(&cb->cb, points, n, pool, sums, counts, similarity, err);
    cm_pool_free(pool);
    return s;
}

uint32_t chimera_codebook_update(chimera_codebook *cb, const double *sums, const int64_t *counts)
{
    return cb && sums && counts ? ix_codebook_update(&cb->cb, sums, counts) : 0;
}

uint32_t chimera_codebook_n_clusters(const chimera_codebook *cb) { return cb ? cb->cb.k : 0; }
uint32_t chimera_codebook_dim(const chimera_codebook *cb) { return cb ? cb->cb.d : 0; }
uint64_t chimera_codebook_seed(const chimera_codebook *cb) { return cb ? cb->cb.seed : 0; }

chimera_status chimera_codebook_to_bytes(const chimera_codebook *cb, void **buf, size_t *n,
                                         chimera_error *err)
{
    if (!cb || !buf || !n)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_to_bytes: an argument is NULL");
    *n = ix_codebook_serialized_size(&cb->cb);
    /* the caller frees it with chimera_free, i.e. cm_free */
    *buf = cm_malloc(*n);
    if (!*buf) return cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    ix_codebook_serialize(&cb->cb, *buf);
    return CHIMERA_OK;
}

chimera_status chimera_codebook_from_bytes(const void *buf, size_t n, chimera_codebook **out,
                                           chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_from_bytes: out is NULL");
    *out = NULL;
    if (!buf) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_from_bytes: buf is NULL");
    chimera_codebook *h;
    CM_TRY(codebook_alloc(&h, err));
    chimera_status s = ix_codebook_deserialize(buf, n, &h->cb, err);
    if (s != CHIMERA_OK) {
        cm_free(h);
        return s;
    }
    *out = h;
    return CHIMERA_OK;
}

chimera_status chimera_codebook_save(const chimera_codebook *cb, const char *path,
                                     chimera_error *err)
{
    if (!cb || !path)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_save: codebook and path are required");
    void *buf;
    size_t n;
    CM_TRY(chimera_codebook_to_bytes(cb, &buf, &n, err));
    cm_writer w;
    chimera_status s = cm_writer_open(&w, path, err);
    if (s == CHIMERA_OK) {
        s = cm_writer_write(&w, buf, n, err);
        if (s == CHIMERA_OK) s = cm_writer_commit(&w, err);
        else cm_writer_abort(&w);
    }
    cm_free(buf);
    return s;
}

chimera_status chimera_codebook_load(const char *path, chimera_codebook **out, chimera_error *err)
{
    if (!out) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_load: out is NULL");
    *out = NULL;
    if (!path) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "codebook_load: path is NULL");
    FILE *f = fopen(path, "rb");
    if (!f) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    chimera_status s = CHIMERA_OK;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot read", path);
    else if (!(buf = cm_malloc((size_t)n + 1))) s = cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    else if (fread(buf, 1, (size_t)n, f) != (size_t)n) s = cm_fail(err, CHIMERA_ERR_IO, "%s: short read", path);
    fclose(f);
    if (s == CHIMERA_OK) {
        s = chimera_codebook_from_bytes(buf, (size_t)n, out, err);
        if (s != CHIMERA_OK) cm_fail_prefix(err, "%s", path);
    }
    cm_free(buf);
    return s;
}

void chimera_codebook_free(chimera_codebook *cb)
{
    if (!cb) return;
    ix_codebook_free(&cb->cb);
    cm_free(cb);
}

void chimera_free(void *p) { cm_free(p); }
