/* The codebook (codebook.h): sampling, training, a Lloyd step in parts, and its bytes. */
#include "index/codebook.h"

#include <math.h>
#include <string.h>
#include <xxhash.h>

#include "cluster/assign.h"
#include "cluster/kmeans.h"
#include "core/alloc.h"
#include "core/error.h"
#include "core/rng.h"

#define CB_MAGIC "CHMRCB\0\1"
#define CB_VERSION 1u
#define CB_HEADER (8 + 4 * 4 + 8)
#define CB_ROWS 4096

int64_t ix_codebook_sample_size(uint32_t k, int64_t n_tokens)
{
    int64_t n = (int64_t)k * IX_TRAIN_POINTS_PER_CENTROID;
    if (n > IX_TRAIN_POINTS_MAX) n = IX_TRAIN_POINTS_MAX;
    if (n < (int64_t)k * IX_TRAIN_POINTS_MIN_PER_CENTROID)
        n = (int64_t)k * IX_TRAIN_POINTS_MIN_PER_CENTROID;
    return n < n_tokens ? n : n_tokens;
}

chimera_status ix_codebook_sample(const data_corpus *c, int64_t n, uint64_t seed,
                                  uint64_t stream, float *out, chimera_error *err)
{
    if (n < 0 || n > c->n_tokens)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "sample: %lld rows of %lld", (long long)n,
                       (long long)c->n_tokens);
    const uint32_t d = c->dim;
    float *conv = NULL;
    if (c->dtype != CM_F32 && !(conv = cm_malloc((size_t)d * sizeof *conv)))
        return cm_fail(err, CHIMERA_ERR_NOMEM, "sample: out of memory");
    cm_rng r;
    cm_rng_seed(&r, seed, 0x5a5a + stream);
    cm_select sel;
    cm_select_begin(&sel, c->n_tokens, n);
    int64_t taken = 0;
    for (int64_t i; (i = cm_select_next(&sel, &r)) >= 0; taken++)
        memcpy(out + (size_t)taken * d, data_corpus_rows(c, i, 1, conv), d * sizeof(float));
    cm_free(conv);
    return CHIMERA_OK;
}

static chimera_status take_result(ivf_kmeans_result *km, uint64_t seed, ix_codebook *out)
{
    memset(out, 0, sizeof *out);
    out->k = km->k;
    out->d = km->d;
    out->seed = seed;
    out->centroids = km->centroids;
    out->n_coarse = km->n_coarse;
    out->coarse = km->coarse;
    out->child_off = km->child_off;
    km->centroids = km->coarse = NULL;
    km->child_off = NULL;
    ivf_kmeans_result_free(km);
    return CHIMERA_OK;
}

chimera_status ix_codebook_train(const float *x, int64_t n, uint32_t d, uint32_t k,
                                 uint64_t seed, cm_pool *pool, chimera_progress_fn progress,
                                 void *progress_user, cm_watch *watch, ix_codebook *out,
                                 chimera_error *err)
{
    memset(out, 0, sizeof *out);
    ivf_kmeans_opts ko = {.seed = seed ? seed : 1234, .pool = pool, .progress = progress,
                          .progress_user = progress_user, .watch = watch,
                          .max_points_per_centroid = IX_TRAIN_POINTS_PER_CENTROID};
    ivf_kmeans_result km;
    CM_TRY(ivf_kmeans_train(x, n, d, d, k, &ko, &km, err));
    return take_result(&km, seed, out);
}

chimera_status ix_codebook_accumulate(const ix_codebook *cb, const float *x, int64_t n,
                                      cm_pool *pool, double *sums, int64_t *counts,
                                      double *sim_sum, chimera_error *err)
{
    ivf_assign_opts ao = {.pool = pool};
    ivf_assigner *a;
    CM_TRY(ivf_assigner_new(cb->centroids, cb->k, cb->d, cb->coarse, cb->n_coarse, cb->child_off,
                            &ao, &a, err));
    uint32_t *ids = cm_malloc(CB_ROWS * sizeof *ids);
    float *ips = cm_malloc(CB_ROWS * sizeof *ips);
    if (!ids || !ips) {
        cm_free(ids);
        cm_free(ips);
        ivf_assigner_free(a);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    }
    const uint32_t d = cb->d;
    double sim = 0;
    for (int64_t r0 = 0; r0 < n; r0 += CB_ROWS) {
        int64_t m = n - r0 < CB_ROWS ? n - r0 : CB_ROWS;
        ivf_assign(a, x + (size_t)r0 * d, m, d, ids, ips);
        for (int64_t i = 0; i < m; i++) {
            const float *xi = x + (size_t)(r0 + i) * d;
            double *s = sums + (size_t)ids[i] * d;
            for (uint32_t t = 0; t < d; t++) s[t] += xi[t];
            counts[ids[i]]++;
            sim += ips[i];
        }
    }
    if (sim_sum) *sim_sum += sim;
    cm_free(ids);
    cm_free(ips);
    ivf_assigner_free(a);
    return CHIMERA_OK;
}

uint32_t ix_codebook_update(ix_codebook *cb, const double *sums, const int64_t *counts)
{
    uint32_t kept = 0;
    const uint32_t d = cb->d;
    for (uint32_t c = 0; c < cb->k; c++) {
        const double *s = sums + (size_t)c * d;
        double nn = 0;
        for (uint32_t t = 0; t < d; t++) nn += s[t] * s[t];
        /* members that cancel out (antipodal points) leave the old centroid, as in
         * cluster/kmeans.c */
        if (!counts[c] || nn <= 1e-30) {
            kept++;
            continue;
        }
        double inv = 1.0 / sqrt(nn);
        for (uint32_t t = 0; t < d; t++) cb->centroids[(size_t)c * d + t] = (float)(s[t] * inv);
    }
    return kept;
}

/* ---- bytes ------------------------------------------------------------------------ */

size_t ix_codebook_serialized_size(const ix_codebook *cb)
{
    size_t n = CB_HEADER + (size_t)cb->k * cb->d * 4;
    if (cb->n_coarse) n += (size_t)cb->n_coarse * cb->d * 4 + ((size_t)cb->n_coarse + 1) * 4;
    return n + 8;
}

static uint8_t *put(uint8_t *p, const void *v, size_t n)
{
    memcpy(p, v, n);
    return p + n;
}

void ix_codebook_serialize(const ix_codebook *cb, void *buf)
{
    uint8_t *p = buf;
    uint32_t hdr[4] = {CB_VERSION, cb->k, cb->d, cb->n_coarse};
    p = put(p, CB_MAGIC, 8);
    p = put(p, hdr, sizeof hdr);
    p = put(p, &cb->seed, 8);
    p = put(p, cb->centroids, (size_t)cb->k * cb->d * 4);
    if (cb->n_coarse) {
        p = put(p, cb->coarse, (size_t)cb->n_coarse * cb->d * 4);
        p = put(p, cb->child_off, ((size_t)cb->n_coarse + 1) * 4);
    }
    uint64_t h = XXH3_64bits(buf, (size_t)(p - (uint8_t *)buf));
    put(p, &h, 8);
}

static int all_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i])) return 0;
    return 1;
}

chimera_status ix_codebook_deserialize(const void *buf, size_t n, ix_codebook *out,
                                       chimera_error *err)
{
    memset(out, 0, sizeof *out);
    const uint8_t *p = buf;
    if (n < CB_HEADER + 8 || memcmp(p, CB_MAGIC, 8) != 0)
        return cm_fail(err, CHIMERA_ERR_FORMAT, "codebook: not a Chimera codebook (%zu bytes, "
                       "no magic)", n);
    uint32_t hdr[4];
    memcpy(hdr, p + 8, sizeof hdr);
    if (hdr[0] != CB_VERSION)
        return cm_fail(err, CHIMERA_ERR_FORMAT, "codebook: version %u, this library reads %u",
                       hdr[0], CB_VERSION);
    ix_codebook cb = {.k = hdr[1], .d = hdr[2], .n_coarse = hdr[3]};
    if (!cb.k || !cb.d || cb.d > 4096 || cb.k > (1u << 24) || cb.n_coarse > cb.k)
        return cm_fail(err, CHIMERA_ERR_FORMAT, "codebook: shape %u x %u (coarse %u) is invalid",
                       cb.k, cb.d, cb.n_coarse);
    memcpy(&cb.seed, p + 8 + sizeof hdr, 8);
    if (n != ix_codebook_serialized_size(&cb))
        return cm_fail(err, CHIMERA_ERR_FORMAT, "codebook: %zu bytes, its shape says %zu "
                       "(truncated or extended)", n, ix_codebook_serialized_size(&cb));
    uint64_t h;
    memcpy(&h, p + n - 8, 8);
    if (XXH3_64bits(buf, n - 8) != h)
        return cm_fail(err, CHIMERA_ERR_FORMAT, "codebook: checksum mismatch (damaged)");
    size_t nc = (size_t)cb.k * cb.d, nq = (size_t)cb.n_coarse * cb.d;
    cb.centroids = cm_aligned_alloc(64, nc * 4);
    if (cb.n_coarse) {
        cb.coarse = cm_aligned_alloc(64, nq * 4);
        cb.child_off = cm_malloc(((size_t)cb.n_coarse + 1) * 4);
    }
    if (!cb.centroids || (cb.n_coarse && (!cb.coarse || !cb.child_off))) {
        ix_codebook_free(&cb);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    }
    p += CB_HEADER;
    memcpy(cb.centroids, p, nc * 4);
    p += nc * 4;
    if (cb.n_coarse) {
        memcpy(cb.coarse, p, nq * 4);
        p += nq * 4;
        memcpy(cb.child_off, p, ((size_t)cb.n_coarse + 1) * 4);
        int ok = cb.child_off[0] == 0 && cb.child_off[cb.n_coarse] == cb.k;
        for (uint32_t m = 0; ok && m < cb.n_coarse; m++) ok = cb.child_off[m] <= cb.child_off[m + 1];
        if (!ok) {
            ix_codebook_free(&cb);
            return cm_fail(err, CHIMERA_ERR_FORMAT, "codebook: inconsistent coarse level");
        }
    }
    if (!all_finite(cb.centroids, nc) || !all_finite(cb.coarse, nq)) {
        ix_codebook_free(&cb);
        return cm_fail(err, CHIMERA_ERR_VALUE, "codebook: a centroid is NaN or infinite");
    }
    *out = cb;
    return CHIMERA_OK;
}

chimera_status ix_codebook_copy(const ix_codebook *cb, ix_codebook *out, chimera_error *err)
{
    *out = *cb;
    out->centroids = out->coarse = NULL;
    out->child_off = NULL;
    size_t nc = (size_t)cb->k * cb->d * 4, nq = (size_t)cb->n_coarse * cb->d * 4;
    out->centroids = cm_aligned_alloc(64, nc);
    if (cb->n_coarse) {
        out->coarse = cm_aligned_alloc(64, nq);
        out->child_off = cm_malloc(((size_t)cb->n_coarse + 1) * 4);
    }
    if (!out->centroids || (cb->n_coarse && (!out->coarse || !out->child_off))) {
        ix_codebook_free(out);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "codebook: out of memory");
    }
    memcpy(out->centroids, cb->centroids, nc);
    if (cb->n_coarse) {
        memcpy(out->coarse, cb->coarse, nq);
        memcpy(out->child_off, cb->child_off, ((size_t)cb->n_coarse + 1) * 4);
    }
    return CHIMERA_OK;
}

void ix_codebook_free(ix_codebook *cb)
{
    if (!cb) return;
    cm_free(cb->centroids);
    cm_free(cb->coarse);
    cm_free(cb->child_off);
    memset(cb, 0, sizeof *cb);
}
