/* bench_rerank_kernel: the exact re-rank (search/rerank.h) on a built index that stores
 * its vectors (`chimera build --rerank f16|bf16|f32`), one thread, as the search runs it
 * for each query's rerank_depth documents.
 *
 * For every query, `depth` documents drawn at random (a seeded generator, the same draw
 * for every run) are scored twice: first as a search meets them (cold: their vectors
 * come from memory, or from the page cache on the first pass over a file), then again
 * at once (warm: the same vectors, now in L2/L3), which is the kernel's own rate. It
 * reports ms per query, ns per (document token x query token) pair, and the
 * multiply-adds per ns counted two ways: the pairs' d each (what the score needs) and
 * the lanes the kernel computes (query tokens padded to a multiple of 8), against the
 * peak of the instruction the kernel is built on, measured here as bench_quant measures
 * its peaks (12 independent chains): 256-bit vfmadd231ps (8 multiply-adds), or for
 * bfloat16 vectors on a CPU with AVX-512 BF16, 256-bit vdpbf16ps (16).
 * Times are the thread's CPU time.
 *
 * Usage: bench_rerank_kernel IDX --queries Q.npy --qlens L.npy [--depth 300] [--reps 3]
 * Q: float32 [total, dim]; L: int64 token counts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/alloc.h"
#include "core/clock.h"
#include "core/cpu.h"
#include "core/npy.h"
#include "core/rng.h"
#include "index/index.h"
#include "search/rerank.h"
#include "peak.h"

static volatile float peak_src = 1.0f;
static volatile float peak_sink;

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double peak_fma(void)
{
    __m256 b = _mm256_set1_ps(peak_src * 0.999f), c = _mm256_set1_ps(peak_src * 1e-9f);
#define STEP(x) _mm256_fmadd_ps(x, b, c)
#define FOLD(x) peak_sink += x[0]
    PEAK_LOOP(__m256, _mm256_set1_ps(peak_src + (float)k), STEP, FOLD, 8)
#undef STEP
#undef FOLD
}

__attribute__((target("avx512f,avx512vl,avx512bf16"))) static double peak_bf16_dot(void)
{
    __m128bh h = _mm256_cvtneps_pbh(_mm256_set1_ps(peak_src * 1e-3f));
    __m256bh b = (__m256bh)_mm256_broadcastsi128_si256((__m128i)h);
#define STEP(x) _mm256_dpbf16_ps(x, b, b)
#define FOLD(x) peak_sink += x[0]
    PEAK_LOOP(__m256, _mm256_set1_ps(peak_src + (float)k), STEP, FOLD, 16)
#undef STEP
#undef FOLD
}
#endif

static int die(const char *what, const chimera_error *err)
{
    fprintf(stderr, "bench_rerank_kernel: %s: %s\n", what, err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    const char *idx = NULL, *qpath = NULL, *lpath = NULL;
    uint32_t depth = 300;
    int reps = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--queries") && i + 1 < argc) qpath = argv[++i];
        else if (!strcmp(argv[i], "--qlens") && i + 1 < argc) lpath = argv[++i];
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc) depth = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !idx) idx = argv[i];
        else {
            fprintf(stderr, "bench_rerank_kernel: unknown or incomplete argument %s\n", argv[i]);
            return 2;
        }
    }
    if (!idx || !qpath || !lpath || depth < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_rerank_kernel IDX --queries Q.npy --qlens L.npy "
                        "[--depth 300] [--reps 3]\n");
        return 2;
    }
    chimera_error err;
    ix_index ix;
    if (ix_open(idx, 0, &ix, &err) != CHIMERA_OK) return die(idx, &err);
    if (!ix.vec_type || !ix.vec_complete) {
        fprintf(stderr, "bench_rerank_kernel: %s stores no vectors for every document (build "
                        "it with --rerank f16)\n", idx);
        return 2;
    }
    cm_npy qn, ln;
    if (cm_npy_open(qpath, &qn, &err) != CHIMERA_OK) return die(qpath, &err);
    if (cm_npy_open(lpath, &ln, &err) != CHIMERA_OK) return die(lpath, &err);
    if (qn.dtype != CM_F32 || qn.ndim != 2 || qn.shape[1] != ix.dim || ln.dtype != CM_I64 ||
        ln.ndim != 1) {
        fprintf(stderr, "bench_rerank_kernel: want float32 queries [total, %u] and int64 "
                        "lengths\n", ix.dim);
        return 2;
    }
    const int64_t *L = ln.data;
    int64_t nq = ln.shape[0], total = 0;
    uint32_t max_m = 0;
    for (int64_t i = 0; i < nq; i++) {
        total += L[i];
        if ((uint32_t)L[i] > max_m) max_m = (uint32_t)L[i];
    }
    if (total != qn.shape[0] || max_m == 0) {
        fprintf(stderr, "bench_rerank_kernel: the lengths sum to %lld, the queries hold %lld "
                        "tokens\n", (long long)total, (long long)qn.shape[0]);
        return 2;
    }
    sp_rerank_scratch s;
    if (sp_rerank_scratch_init(&s, ix.dim, max_m, &err) != CHIMERA_OK) return die("scratch", &err);
    uint32_t *docs = cm_malloc((size_t)depth * sizeof *docs);
    float *out = cm_malloc((size_t)depth * sizeof *out);
    if (!docs || !out) return fprintf(stderr, "bench_rerank_kernel: out of memory\n"), 1;

    static const char *const vec_names[] = {"none", "f16", "bf16", "f32"};
    printf("index %s: %lld documents, %lld tokens, d = %u, vectors %s; %lld queries "
           "(mean %.1f tokens), depth %u, best of %d runs\n", idx, (long long)ix.n_docs,
           (long long)ix.n_tokens, ix.dim, vec_names[ix.vec_type], (long long)nq,
           (double)total / (double)nq, depth, reps);
    double best[2] = {1e300, 1e300}, pairs = 0.0, lanes = 0.0;
    float check = 0.0f;
    for (int rep = 0; rep < reps; rep++) {
        cm_rng r;
        cm_rng_seed(&r, 7, 0);
        double t[2] = {0.0, 0.0};
        pairs = lanes = 0.0;
        const float *q = qn.data;
        for (int64_t i = 0; i < nq; q += (size_t)L[i] * ix.dim, i++) {
            uint32_t m = (uint32_t)L[i];
            for (uint32_t k = 0; k < depth; k++)
                docs[k] = (uint32_t)cm_rng_below(&r, (uint64_t)ix.n_docs);
            for (uint32_t k = 0; k < depth; k++) {
                const ix_segment *sg = ix_doc_segment(&ix, docs[k]);
                int64_t ld = docs[k] - sg->doc_base;
                double n = (double)(sg->doc_off[ld + 1] - sg->doc_off[ld]);
                pairs += n * m;
                lanes += n * ((m + 7) / 8 * 8);
            }
            for (int pass = 0; pass < 2; pass++) { /* cold, then warm */
                double t0 = cm_thread_cpu_now();
                sp_rerank_score(&ix, docs, depth, q, m, &s, out);
                t[pass] += cm_thread_cpu_now() - t0;
                check += out[0];
            }
        }
        for (int pass = 0; pass < 2; pass++)
            if (t[pass] < best[pass]) best[pass] = t[pass];
    }
    double peak = 0.0;
    const char *peak_of = "none measured (no AVX2)";
#if defined(__x86_64__)
    if (ix.vec_type == CHIMERA_RERANK_BF16 && cm_bf16_dot_in_use()) {
        peak = peak_bf16_dot();
        peak_of = "256-bit vdpbf16ps";
    } else if (cm_simd_level_get() >= CM_SIMD_AVX2) {
        peak = peak_fma();
        peak_of = "256-bit vfmadd231ps";
    }
#endif
    printf("peak of the kernel's instruction (%s): %.1f GMAC/s\n", peak_of, peak);
    printf("%-5s %12s %16s %16s %16s %8s\n", "pass", "ms/query", "ns/(doc x query)",
           "GMAC/s (pairs)", "GMAC/s (lanes)", "of peak");
    const char *name[2] = {"cold", "warm"};
    for (int pass = 0; pass < 2; pass++)
        printf("%-5s %12.3f %16.3f %16.1f %16.1f %7.0f%%\n", name[pass],
               1e3 * best[pass] / (double)nq, 1e9 * best[pass] / pairs,
               pairs * ix.dim / best[pass] / 1e9, lanes * ix.dim / best[pass] / 1e9,
               peak > 0 ? 100.0 * lanes * ix.dim / best[pass] / 1e9 / peak : 0.0);
    printf("(scores checked: %g)\n", (double)check);
    cm_free(docs);
    cm_free(out);
    sp_rerank_scratch_free(&s);
    cm_npy_close(&qn);
    cm_npy_close(&ln);
    ix_close(&ix);
    return 0;
}
