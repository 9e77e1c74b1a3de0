/* `chimera compact --recluster`: retrain the centroids of a changed index and rebuild it
 * from what it holds, swapped in atomically like a build (update.h says when: drift).
 *
 * An index built with --rerank keeps its input vectors (sections vectors_*): the rebuild
 * then starts from them, exactly as a build from the original vectors would (in their
 * stored element type: f16 and bf16 widen exactly and narrow back to the same values,
 * so the new index stores the same vectors), and loses nothing to the codes.
 *
 * Otherwise the index keeps only the codes, and the tokens are reconstructed from the
 * full-bit codes: the estimator <q, v> ~= <q, c> + alpha +
 * kappa <u, q'> (quant/quant_math.h) is the inner product of q with
 *
 *     v' = c' + kappa u + alpha c' / |c'|^2        (in the rotated space; v = P^T v')
 *
 * which reproduces every estimate the index makes, so rebuilding from these vectors
 * loses only what the codes already lost (B bits per dimension), plus the new codes'
 * own rounding. bench/RESULTS.md (section 5.2) measures the recall this costs against a rebuild
 * from the original vectors; users who still have them should rebuild from them.
 *
 * The live tokens are reconstructed in memory (dim floats each: about 4x the index's
 * host bytes at B = 4), under the writer lock; the build then runs without it, so adds
 * and deletes may go on meanwhile, and commits only if the index is still at the
 * generation it read (CHIMERA_ERR_CONFLICT otherwise: nothing is replaced, and the
 * caller runs it again). The metadata database (metadata.h) is copied into the new
 * index; its log starts afresh there. */
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "index/index.h"
#include "index/metadata.h"
#include "index/store.h"
#include "index/update.h"
#include "quant/rabitq.h"

/* The live documents of ix as vectors: out [n_tokens_live x dim], doclens and ids
 * [n_docs_live]; from the stored vectors when every segment has them. */
static void reconstruct(const ix_index *ix, float *out, int64_t *doclens, int64_t *ids)
{
    if (ix->vec_complete) {
        const size_t row = ix->dim * ix_vec_elem_bytes(ix->vec_type);
        int64_t nd = 0, at = 0;
        for (uint32_t si = 0; si < ix->n_segs; si++) {
            const ix_segment *sg = &ix->segs[si];
            for (int64_t ld = 0; ld < sg->n_docs; ld++) {
                if (ix_is_deleted(ix, sg->doc_base + ld)) continue;
                int64_t t0 = sg->doc_off[ld], n = sg->doc_off[ld + 1] - t0;
                doclens[nd] = n;
                ids[nd++] = sg->doc_ids[ld];
                ix_vec_decode(ix->vec_type, (const uint8_t *)sg->vectors + (size_t)t0 * row,
                              (size_t)n * ix->dim, out + (size_t)at * ix->dim);
                at += n;
            }
        }
        return;
    }
    const uint32_t dp = ix->dim_pad, d = ix->dim, B = ix->bits;
    const size_t cB = qm_codeB_bytes(dp, B);
    const float off = qm_codeB_offset(B);
    float crot[QUANT_DIM_MAX], v[QUANT_DIM_MAX];
    int64_t nd = 0, row = 0;
    for (uint32_t si = 0; si < ix->n_segs; si++) {
        const ix_segment *sg = &ix->segs[si];
        for (int64_t ld = 0; ld < sg->n_docs; ld++) {
            if (ix_is_deleted(ix, sg->doc_base + ld)) continue;
            doclens[nd] = sg->doc_off[ld + 1] - sg->doc_off[ld];
            ids[nd++] = sg->doc_ids[ld];
            for (int64_t t = sg->doc_off[ld]; t < sg->doc_off[ld + 1]; t++, row++) {
                const float *c = ix->centroids + (size_t)sg->tok_cid[t] * d;
                quant_rotate(&ix->rot, c, crot);
                double cc = 0;
                for (uint32_t i = 0; i < dp; i++) cc += (double)crot[i] * crot[i];
                const quant_fB *f = &sg->dB_fact[t];
                float along = cc > 0 ? qm_f16_to_f32(f->alpha) / (float)cc : 0.0f;
                const uint8_t *code = sg->dB_codes + (size_t)t * cB;
                for (uint32_t i = 0; i < dp; i++)
                    v[i] = crot[i] * (1.0f + along) +
                           f->kappa * ((float)qm_codeB_get(code, B <= 4 ? 4 : 8, i) - off);
                quant_unrotate(&ix->rot, v, out + (size_t)row * d);
            }
        }
    }
}

chimera_status ix_recluster(const char *dir, const ix_update_opts *opts,
                            const ix_recluster_opts *ro, ix_update_report *report,
                            chimera_error *err)
{
    ix_update_report rep_local, *rep = report ? report : &rep_local;
    memset(rep, 0, sizeof *rep);
    rep->drift_below = -1;
    ix_update_opts o = {0};
    if (opts) o = *opts;
    ix_store_lock *lock = NULL;
    ix_index ix;
    int opened = 0;
    float *tok = NULL;
    int64_t *lens = NULL, *ids = NULL;
    uint64_t gen = 0;
    uint32_t bits = 0;
    int rerank = CHIMERA_RERANK_NONE; /* the new index keeps the vectors the old one had */
    int64_t n_docs = 0, n_tok = 0, n_del = 0;
    chimera_status s = ix_store_require_dir(dir, err);
    if (s == CHIMERA_OK) s = ix_store_lock_acquire(dir, o.lock_timeout_ms, &lock, err);
    if (s == CHIMERA_OK) {
        s = ix_open(dir, 1, &ix, err); /* verified: the rebuild re-checksums what it reads */
        opened = s == CHIMERA_OK;
    }
    if (s == CHIMERA_OK) { /* the metadata database brought up to this generation (a batch
                             * a killed writer left to replay, a hot journal) while the lock
                             * is held, since the build copies the file as it is */
        ix_meta *md = NULL;
        s = ix_meta_begin(dir, &ix, 0, &md, NULL, err);
        ix_meta_end(md, 0);
    }
    if (s == CHIMERA_OK && ix.n_deleted == ix.n_docs)
        s = cm_fail(err, CHIMERA_ERR_EMPTY, "%s: all %lld documents are deleted; nothing to "
                    "recluster", dir, (long long)ix.n_docs);
    if (s == CHIMERA_OK) {
        gen = ix_store_generation(ix.st);
        bits = ix.bits;
        if (ix.vec_complete) rerank = ix.vec_type;
        n_del = ix.n_deleted;
        n_docs = ix.n_docs - ix.n_deleted;
        for (uint32_t si = 0; si < ix.n_segs; si++) {
            const ix_segment *sg = &ix.segs[si];
            for (int64_t ld = 0; ld < sg->n_docs; ld++)
                if (!ix_is_deleted(&ix, sg->doc_base + ld))
                    n_tok += sg->doc_off[ld + 1] - sg->doc_off[ld];
        }
        size_t bytes;
        if (cm_mul_size((size_t)n_tok, (size_t)ix.dim * sizeof(float), &bytes) != 0) bytes = SIZE_MAX;
        tok = cm_malloc(bytes);
        lens = cm_malloc((size_t)n_docs * sizeof *lens);
        ids = cm_malloc((size_t)n_docs * sizeof *ids);
        if (!tok || !lens || !ids)
            s = cm_fail(err, CHIMERA_ERR_NOMEM,
                        "%s: out of memory for the %lld reconstructed tokens (%zu bytes)", dir,
                        (long long)n_tok, bytes);
        else
            reconstruct(&ix, tok, lens, ids);
    }
    uint32_t dim = opened ? ix.dim : 0;
    if (opened) ix_close(&ix);
    ix_store_lock_release(lock); /* the build runs without it; its commit checks gen */
    if (s == CHIMERA_OK) {
        data_corpus c;
        s = data_corpus_wrap(&c, tok, n_tok, dim, lens, n_docs, ids, NULL, err);
        if (s == CHIMERA_OK) {
            char *mp = ix_meta_path(dir);
            ix_build_opts bo = {.bits = bits, .n_clusters = ro ? ro->n_clusters : 0,
                                .n_threads = ro ? ro->n_threads : 0,
                                .seed = ro ? ro->seed : 0, .no_sync = o.no_sync,
                                .progress = o.progress, .progress_user = o.progress_user,
                                .cancel = o.cancel, .cancel_user = o.cancel_user,
                                .check_generation = 1, .expect_generation = gen,
                                .carry_meta = mp, .rerank = rerank,
                                .calibrate = ro ? ro->calibrate : NULL,
                                .calibrate_user = ro ? ro->calibrate_user : NULL};
            ix_build_report br;
            s = mp ? ix_build(&c, dir, &bo, &br, err)
                   : cm_fail(err, CHIMERA_ERR_NOMEM, "recluster: out of memory");
            cm_free(mp);
            data_corpus_free(&c);
            if (s == CHIMERA_ERR_CONFLICT)
                cm_fail(err, CHIMERA_ERR_CONFLICT,
                        "%s changed while its centroids were retrained (generation %llu when "
                        "it started); the index was left as it is: run compact --recluster "
                        "again", dir, (unsigned long long)gen);
            if (s == CHIMERA_OK) {
                rep->generation = gen + 1;
                rep->docs_deleted = n_del;
                rep->n_docs = n_docs;
                rep->n_segments = 1;
                rep->merged = 1;
                rep->seconds = br.total_seconds;
                rep->peak_rss = br.peak_rss;
            }
        }
    }
    cm_free(tok);
    cm_free(lens);
    cm_free(ids);
    return s;
}
