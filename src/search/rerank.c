/* The exact re-rank kernel (rerank.h). */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/blas.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/f16.h"
#include "search/rerank.h"

/* A block's piece of a document: its position in docs[], first row in the block, rows,
 * and whether the piece starts and ends the document. */
enum { SEG_DOC, SEG_ROW, SEG_ROWS, SEG_FLAGS, SEG_WORDS };
#define SEG_FIRST 1u
#define SEG_LAST 2u

static void f16_widen_scalar(const uint16_t *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) dst[i] = cm_f16_to_f32(src[i]);
}

static void bf16_widen_scalar(const uint16_t *src, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) dst[i] = cm_bf16_to_f32(src[i]);
}

/* NULL for float32, which is copied as it is. */
static sp_widen_fn widen_for(int type)
{
    int simd = cm_simd_level_get() >= CM_SIMD_AVX2;
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
    s->rows = cm_aligned_alloc(64, (size_t)SP_RERANK_ROWS * dim * sizeof(float));
    s->c = cm_aligned_alloc(64, (size_t)SP_RERANK_ROWS * max_m * sizeof(float));
    s->run = cm_malloc((size_t)max_m * sizeof(float));
    s->seg = cm_malloc((size_t)SP_RERANK_ROWS * SEG_WORDS * sizeof(uint32_t));
    if (!s->rows || !s->c || !s->run || !s->seg) {
        sp_rerank_scratch_free(s);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "search: out of memory for re-rank scratch");
    }
    return CHIMERA_OK;
}

void sp_rerank_scratch_free(sp_rerank_scratch *s)
{
    cm_free(s->rows);
    cm_free(s->c);
    cm_free(s->run);
    cm_free(s->seg);
    memset(s, 0, sizeof *s);
}

void sp_rerank_score(const ix_index *ix, const uint32_t *docs, uint32_t n, const float *q,
                     uint32_t m, sp_rerank_scratch *s, float *out)
{
    const uint32_t d = ix->dim;
    const size_t es = ix_vec_elem_bytes(ix->vec_type);
    const sp_widen_fn widen = widen_for(ix->vec_type);
    uint32_t i = 0;
    int64_t placed = 0; /* rows of docs[i] in earlier blocks */
    while (i < n) {
        /* fill a block with whole documents, or the next piece of a long one */
        uint32_t nr = 0, nseg = 0;
        while (i < n && nr < SP_RERANK_ROWS) {
            const ix_segment *sg = ix_doc_segment(ix, docs[i]);
            int64_t ld = docs[i] - sg->doc_base, t0 = sg->doc_off[ld];
            int64_t len = sg->doc_off[ld + 1] - t0;
            if (len == 0) {
                out[i++] = -INFINITY;
                continue;
            }
            int64_t take = len - placed;
            if (take > SP_RERANK_ROWS - nr) take = SP_RERANK_ROWS - nr;
            const uint8_t *src = (const uint8_t *)sg->vectors + (size_t)(t0 + placed) * d * es;
            float *dst = s->rows + (size_t)nr * d;
            if (widen) widen((const uint16_t *)src, (size_t)take * d, dst);
            else memcpy(dst, src, (size_t)take * d * sizeof(float));
            uint32_t *g = s->seg + (size_t)nseg++ * SEG_WORDS;
            g[SEG_DOC] = i;
            g[SEG_ROW] = nr;
            g[SEG_ROWS] = (uint32_t)take;
            g[SEG_FLAGS] = (placed == 0 ? SEG_FIRST : 0) | (placed + take == len ? SEG_LAST : 0);
            nr += (uint32_t)take;
            placed += take;
            if (placed == len) {
                i++;
                placed = 0;
            }
        }
        if (nr == 0) break; /* only empty documents were left */
        cm_sgemm_nt((int)nr, (int)m, (int)d, 1.0f, s->rows, (int)d, q, (int)d, 0.0f, s->c, (int)m);
        /* Per piece, the running maxima over its rows. Only a block's last piece can end
         * before its document does, and the next block starts with the rest of it, so
         * one running vector carries it across. */
        for (uint32_t g0 = 0; g0 < nseg; g0++) {
            const uint32_t *g = s->seg + (size_t)g0 * SEG_WORDS;
            const float *c = s->c + (size_t)g[SEG_ROW] * m;
            float *mx = s->run;
            uint32_t r = 0;
            if (g[SEG_FLAGS] & SEG_FIRST) {
                memcpy(mx, c, (size_t)m * sizeof *mx);
                s->bad = 0.0f;
                r = 1;
            }
            /* A maximum silently drops a NaN, so damage is tracked apart: x - x is 0 for
             * every finite x and NaN for NaN and infinities. */
            float bad = s->bad;
            for (; r < g[SEG_ROWS]; r++) {
                const float *cr = c + (size_t)r * m;
                for (uint32_t j = 0; j < m; j++) {
                    mx[j] = cr[j] > mx[j] ? cr[j] : mx[j];
                    bad += cr[j] - cr[j];
                }
            }
            for (uint32_t j = 0; j < m; j++) bad += mx[j] - mx[j];
            s->bad = bad;
            if (g[SEG_FLAGS] & SEG_LAST) {
                float sum = 0.0f; /* in query-token order, as exact search sums */
                for (uint32_t j = 0; j < m; j++) sum += mx[j];
                out[g[SEG_DOC]] = bad == 0.0f ? sum : NAN;
            }
        }
    }
}
