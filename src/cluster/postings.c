/* Posting lists (CSR) and their size statistics.
 *
 * The IVF of Jegou et al. (paper §2.3): per centroid the tokens assigned to it. Built
 * with a two-pass stable counting sort, O(n + k), so each list is in token order, which
 * keeps a document's tokens adjacent and the layout reproducible. The imbalance factor
 * is Faiss's K * sum n_c^2 / n^2: the expected list length a random token lands in,
 * relative to the mean, i.e. how much more work probing costs than with equal lists. */
#include <stdlib.h>
#include <string.h>

#include "cluster/postings.h"
#include "core/error.h"
#include "core/alloc.h"

void ivf_postings_free(ivf_postings *p)
{
    if (!p) return;
    cm_free(p->offsets);
    cm_free(p->ids);
    memset(p, 0, sizeof *p);
}

chimera_status ivf_postings_build(const uint32_t *assign, int64_t n, uint32_t k,
                                  ivf_postings *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    if (k == 0 || n < 0) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "postings: need k >= 1");
    if (n > (int64_t)UINT32_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "postings: %lld tokens exceed the 2^32 - 1 token ids of one shard",
                       (long long)n);
    out->offsets = cm_calloc((size_t)k + 1, sizeof(int64_t));
    out->ids = cm_malloc(sizeof(uint32_t) * (size_t)(n ? n : 1));
    if (!out->offsets || !out->ids) {
        ivf_postings_free(out);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "postings: out of memory (n = %lld)", (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
        if (assign[i] >= k) {
            ivf_postings_free(out);
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "postings: token %lld assigned to centroid %u >= k = %u",
                           (long long)i, assign[i], k);
        }
        out->offsets[assign[i] + 1]++;
    }
    for (uint32_t c = 0; c < k; c++) out->offsets[c + 1] += out->offsets[c];
    /* Second pass fills each list from its start; offsets[c] walks up to the old
     * offsets[c+1] and is restored by the shift below. */
    for (int64_t i = 0; i < n; i++) out->ids[out->offsets[assign[i]]++] = (uint32_t)i;
    for (uint32_t c = k; c > 0; c--) out->offsets[c] = out->offsets[c - 1];
    out->offsets[0] = 0;
    out->k = k;
    out->n = n;
    return CHIMERA_OK;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int ivf_postings_stats_get(const ivf_postings *p, ivf_postings_stats *st)
{
    memset(st, 0, sizeof *st);
    if (p->k == 0) return 0;
    int64_t *sz = cm_malloc(sizeof(int64_t) * p->k);
    if (!sz) return -1;
    double sq = 0;
    for (uint32_t c = 0; c < p->k; c++) {
        sz[c] = p->offsets[c + 1] - p->offsets[c];
        sq += (double)sz[c] * (double)sz[c];
        st->n_empty += sz[c] == 0;
    }
    qsort(sz, p->k, sizeof(int64_t), cmp_i64);
    st->min = sz[0];
    st->max = sz[p->k - 1];
    st->median = sz[p->k / 2];
    st->mean = (double)p->n / p->k;
    st->imbalance = p->n ? (double)p->k * sq / ((double)p->n * (double)p->n) : 0.0;
    cm_free(sz);
    return 0;
}
