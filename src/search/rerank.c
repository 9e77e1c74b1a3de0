/* The exact re-rank kernel (rerank.h): the scalar reference, the choice of kernels, and
 * the loop over documents. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/f16.h"
#include "search/rerank.h"

void sp_maxsim_scalar(const float *rows, uint32_t n, uint32_t dim, const float *qt,
                      uint32_t m_pad, float *mx, float *bad)
{
    float acc[8];
    float b = 0.0f;
    for (uint32_t r = 0; r < n; r++) {
        const float *a = rows + (size_t)r * dim;
        for (uint32_t j0 = 0; j0 < m_pad; j0 += 8) {
            for (int v = 0; v < 8; v++) acc[v] = 0.0f;
            for (uint32_t i = 0; i < dim; i++)
                for (int v = 0; v < 8; v++) acc[v] += a[i] * qt[(size_t)i * m_pad + j0 + v];
            for (int v = 0; v < 8; v++) {
                mx[j0 + v] = acc[v] > mx[j0 + v] ? acc[v] : mx[j0 + v];
                b += acc[v] - acc[v];
            }
        }
    }
    *bad += b;
}

sp_maxsim_fn sp_maxsim_for(int level)
{
    return level >= CM_SIMD_AVX2 ? sp_maxsim_avx2 : sp_maxsim_scalar;
}

static void f16_widen_scalar(const uint16_t *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) dst[i] = cm_f16_to_f32(src[i]);
}

static void bf16_widen_scalar(const uint16_t *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) dst[i] = cm_bf16_to_f32(src[i]);
}

/* NULL for float32, which is read in place. */
static sp_widen_fn widen_for(int type, int level)
{
    int simd = level >= CM_SIMD_AVX2;
    switch (type) {
    case CHIMERA_RERANK_F16: return simd ? sp_f16_widen_avx2 : f16_widen_scalar;
    case CHIMERA_RERANK_BF16: return simd ? sp_bf16_widen_avx2 : bf16_widen_scalar;
    default: return NULL;
    }
}

chimera_status sp_rerank_scratch_init(sp_rerank_scratch *s, uint32_t dim, uint32_t max_m,
                                      chimera_error *err)
{
    memset(s, 0, sizeof *s);
    s->max_m = max_m;
    uint32_t mp = sp_rerank_pad(max_m);
    s->rows = cm_aligned_alloc(64, (size_t)SP_RERANK_ROWS * dim * sizeof(float));
    s->qt = cm_aligned_alloc(64, (size_t)dim * mp * sizeof(float));
    s->mx = cm_aligned_alloc(64, (size_t)mp * sizeof(float));
    s->qp = cm_aligned_alloc(64, (size_t)(dim + 1) / 2 * mp * sizeof(uint32_t));
    if (!s->rows || !s->qt || !s->mx || !s->qp) {
        sp_rerank_scratch_free(s);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory for re-rank scratch");
    }
    return CHIMERA_OK;
}

void sp_rerank_scratch_free(sp_rerank_scratch *s)
{
    cm_free(s->rows);
    cm_free(s->qt);
    cm_free(s->mx);
    cm_free(s->qp);
    memset(s, 0, sizeof *s);
}

/* Rows [r0, r0 + SP_RERANK_ROWS) of document `doc` (those it has), fetched into L2 while
 * the block before them is scored: the documents lie at random in the section, and the
 * widening loop, whose loads the out-of-order window cannot run far enough ahead of,
 * spent a third of the re-rank waiting on memory. One block ahead (8 KiB of half rows
 * at d = 128) is a few microseconds of multiply-adds, longer than memory takes. */
static void prefetch_block(const ix_index *ix, uint32_t doc, int64_t r0, size_t row_bytes)
{
    const ix_segment *sg = ix_doc_segment(ix, doc);
    int64_t ld = doc - sg->doc_base, t0 = sg->doc_off[ld], len = sg->doc_off[ld + 1] - t0;
    if (r0 >= len) return;
    int64_t nr = len - r0 < SP_RERANK_ROWS ? len - r0 : SP_RERANK_ROWS;
    const char *a = (const char *)sg->vectors + (size_t)(t0 + r0) * row_bytes;
    for (size_t o = 0; o < (size_t)nr * row_bytes; o += 64) __builtin_prefetch(a + o, 0, 2);
}

void sp_rerank_transpose(const float *q, uint32_t m, uint32_t dim, int bf16, float *qt)
{
    const uint32_t mp = sp_rerank_pad(m);
    for (uint32_t i = 0; i < dim; i++) {
        float *row = qt + (size_t)i * mp;
        for (uint32_t j = 0; j < m; j++) {
            float v = q[(size_t)j * dim + i];
            row[j] = bf16 ? cm_bf16_to_f32(cm_f32_to_bf16(v)) : v;
        }
        for (uint32_t j = m; j < mp; j++) row[j] = 0.0f;
    }
}

void sp_bf16_pairs(const float *qt, uint32_t dim, uint32_t m_pad, uint32_t *qp)
{
    for (uint32_t p = 0; p < (dim + 1) / 2; p++)
        for (uint32_t j = 0; j < m_pad; j++) {
            uint32_t lo = cm_f32_to_bf16(qt[(size_t)(2 * p) * m_pad + j]);
            uint32_t hi = 2 * p + 1 < dim ? cm_f32_to_bf16(qt[(size_t)(2 * p + 1) * m_pad + j]) : 0;
            qp[(size_t)p * m_pad + j] = lo | hi << 16;
        }
}

void sp_rerank_score(const ix_index *ix, const uint32_t *docs, uint32_t n, const float *q,
                     uint32_t m, sp_rerank_scratch *s, float *out)
{
    const uint32_t d = ix->dim, mp = sp_rerank_pad(m);
    const size_t es = ix_vec_elem_bytes(ix->vec_type);
    const int level = cm_simd_level_get();
    const sp_widen_fn widen = widen_for(ix->vec_type, level);
    const sp_maxsim_fn maxsim = sp_maxsim_for(level);
    const int bf16 = ix->vec_type == CHIMERA_RERANK_BF16;
    const int bf16_dot = bf16 && cm_bf16_dot_in_use();
    sp_rerank_transpose(q, m, d, bf16, s->qt);
    if (bf16_dot) sp_bf16_pairs(s->qt, d, mp, s->qp); /* the rounded query: exact */
    for (uint32_t k = 0; k < IX_DOC_OFF_AHEAD && k < n; k++) ix_doc_prefetch_off(ix, docs[k]);
    for (uint32_t k = 0; k < n; k++) {
        if (k + IX_DOC_OFF_AHEAD < n) ix_doc_prefetch_off(ix, docs[k + IX_DOC_OFF_AHEAD]);
        const ix_segment *sg = ix_doc_segment(ix, docs[k]);
        int64_t ld = docs[k] - sg->doc_base, t0 = sg->doc_off[ld];
        int64_t len = sg->doc_off[ld + 1] - t0;
        if (len == 0) {
            out[k] = -INFINITY;
            continue;
        }
        const uint8_t *src = (const uint8_t *)sg->vectors + (size_t)t0 * d * es;
        for (uint32_t j = 0; j < mp; j++) s->mx[j] = -INFINITY;
        float bad = 0.0f;
        for (int64_t r = 0; r < len; r += SP_RERANK_ROWS) {
            uint32_t nr = (uint32_t)(len - r < SP_RERANK_ROWS ? len - r : SP_RERANK_ROWS);
            if (r + SP_RERANK_ROWS < len) prefetch_block(ix, docs[k], r + SP_RERANK_ROWS, d * es);
            else if (k + 1 < n) prefetch_block(ix, docs[k + 1], 0, d * es);
            const uint8_t *blk = src + (size_t)r * d * es;
            if (bf16_dot) {
                sp_maxsim_bf16_avx512((const uint16_t *)blk, nr, d, s->qp, mp, s->mx, &bad);
            } else if (widen) {
                widen((const uint16_t *)blk, (size_t)nr * d, s->rows);
                maxsim(s->rows, nr, d, s->qt, mp, s->mx, &bad);
            } else {
                maxsim((const float *)blk, nr, d, s->qt, mp, s->mx, &bad);
            }
        }
        float sum = 0.0f; /* in query-token order, as exact search sums */
        for (uint32_t j = 0; j < m; j++) sum += s->mx[j];
        out[k] = bad == 0.0f ? sum : NAN;
    }
}
