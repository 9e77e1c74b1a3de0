/* The stored vectors of the exact re-rank tier (sections vectors_f32, vectors_bf16,
 * vectors_f16; docs/format.md): element types, conversion, and the streamed writer the
 * build and an add share.
 *
 * The vectors are kept in the user's original space (not rotated, dim wide, not
 * dim_pad), so that an exact score over them is the score chimera_corpus_search
 * computes, and a recluster can rebuild from them as from the input. */
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/f16.h"
#include "index/index.h"
#include "index/store.h"

/* Rows converted per write: 1 MiB of float32 at dim = 128. */
#define VEC_BLOCK_ROWS 2048

int ix_vec_section(int type)
{
    switch (type) {
    case CHIMERA_RERANK_F16: return IX_SEC_vectors_f16;
    case CHIMERA_RERANK_BF16: return IX_SEC_vectors_bf16;
    default: return IX_SEC_vectors_f32;
    }
}

size_t ix_vec_elem_bytes(int type) { return type == CHIMERA_RERANK_F32 ? 4 : 2; }

void ix_vec_encode(int type, const float *src, size_t n, void *dst)
{
    if (type == CHIMERA_RERANK_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    if (type == CHIMERA_RERANK_F16)
        for (size_t i = 0; i < n; i++) h[i] = cm_f32_to_f16(src[i]);
    else
        for (size_t i = 0; i < n; i++) h[i] = cm_f32_to_bf16(src[i]);
}

void ix_vec_decode(int type, const void *src, size_t n, float *dst)
{
    if (type == CHIMERA_RERANK_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    const uint16_t *h = src;
    if (type == CHIMERA_RERANK_F16)
        for (size_t i = 0; i < n; i++) dst[i] = cm_f16_to_f32(h[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = cm_bf16_to_f32(h[i]);
}

chimera_status ix_vec_write(ix_store_writer *w, const char *name, int type, const data_corpus *c,
                            chimera_error *err)
{
    const size_t es = ix_vec_elem_bytes(type), d = c->dim;
    float *conv = cm_malloc((size_t)VEC_BLOCK_ROWS * d * sizeof(float));
    uint8_t *out = cm_malloc((size_t)VEC_BLOCK_ROWS * d * es);
    chimera_status s = CHIMERA_OK;
    if (!conv || !out) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", name);
        goto done;
    }
    ix_store_type t = {ix_sections[ix_vec_section(type)].dtype, 2, {(uint64_t)c->n_tokens, d, 0, 0}};
    s = ix_store_section_begin(w, name, &t, err);
    for (int64_t r0 = 0; r0 < c->n_tokens && s == CHIMERA_OK; r0 += VEC_BLOCK_ROWS) {
        int64_t n = c->n_tokens - r0 < VEC_BLOCK_ROWS ? c->n_tokens - r0 : VEC_BLOCK_ROWS;
        const float *rows = data_corpus_rows(c, r0, n, conv);
        ix_vec_encode(type, rows, (size_t)n * d, out);
        s = ix_store_section_write(w, out, (size_t)n * d * es, err);
    }
    if (s == CHIMERA_OK) s = ix_store_section_end(w, err);
done:
    cm_free(conv);
    cm_free(out);
    return s;
}
