/* Micro-benchmark of src/quant: ns per token of every kernel shape and SIMD variant the
 * CPU runs, the bytes/s they reach against a streaming-read bandwidth measured in the
 * same run (and the rate of random 128-byte row reads, the floor of the search's
 * gathers), encoder speed by B, and an estimator error table by B (mean abs error, RMSE,
 * bias, miss rate of the eps0 = 1.9 bound) with the factors as stored (f16) and in
 * float64, which is the evidence for the factor storage choice.
 *
 * The B-bit doc shapes are also reported per (document token x query token) pair and
 * as a fraction of the core's peak multiply-add rate for the instruction each path is
 * built on, measured here (peak_*: 12 independent chains of that one instruction, so
 * the measured rate is the issue throughput): scalar mul+add and int32 imul+add,
 * 256-bit vfmadd231ps (AVX2 float), 256-bit vpmaddubsw (AVX2 int8, 32 byte MACs; the
 * adds that widen its pair sums go to other ports), 512-bit vfmadd231ps and 512-bit
 * vpdpbusd (AVX-512 float and VNNI int8, 64 byte MACs).
 *
 * Times are the thread's CPU time, best of 3 rounds (TIME).
 *
 * Usage: bench_quant [n_tokens_list] (default 1<<20). d = 128, m = 32 query tokens,
 * random codes for the kernel timings (the kernels are data-independent), encoded
 * clustered tokens for the error table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/clock.h"
#include "core/cpu.h"
#include "peak.h"
#include "core/f16.h"
#include "core/rng.h"
#include "quant/kernels.h"
#include "quant/rabitq.h"
#include "quant/rotation.h"
#include "core/alloc.h"

#define D 128
#define M 32
#define DOC_LEN 32

static volatile uint64_t sink;
static volatile float fsink;
static volatile int isrc = 3;
static volatile float fsrc = 1.0f;

/* ---- peak multiply-add rates (MACs per ns), one per instruction ---- */

static double peak_scalar_float(void)
{
    float a[PEAK_CHAINS], b = fsrc * 0.999f, c = fsrc * 1e-9f;
    for (int k = 0; k < PEAK_CHAINS; k++) a[k] = fsrc + (float)k;
    double t0 = cm_thread_cpu_now();
    for (long i = 0; i < PEAK_ITERS / 4; i++)
        for (int k = 0; k < PEAK_CHAINS; k++) a[k] = a[k] * b + c;
    double t = cm_thread_cpu_now() - t0;
    for (int k = 0; k < PEAK_CHAINS; k++) fsink += a[k];
    return (double)PEAK_ITERS / 4 * PEAK_CHAINS / t / 1e9;
}

static double peak_scalar_int(void)
{
    int32_t a[PEAK_CHAINS], b = isrc, c = isrc + 1;
    for (int k = 0; k < PEAK_CHAINS; k++) a[k] = isrc + k;
    double t0 = cm_thread_cpu_now();
    for (long i = 0; i < PEAK_ITERS / 4; i++) {
        _Pragma("GCC unroll 12")
        for (int k = 0; k < PEAK_CHAINS; k++) {
            a[k] = (int32_t)((uint32_t)a[k] * (uint32_t)b + (uint32_t)c);
            __asm__ volatile("" : "+r"(a[k]));
        }
    }
    double t = cm_thread_cpu_now() - t0;
    for (int k = 0; k < PEAK_CHAINS; k++) sink += (uint64_t)a[k];
    return (double)PEAK_ITERS / 4 * PEAK_CHAINS / t / 1e9;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double peak_avx2_float(void)
{
    __m256 b = _mm256_set1_ps(fsrc * 0.999f), c = _mm256_set1_ps(fsrc * 1e-9f);
#define STEP(x) _mm256_fmadd_ps(x, b, c)
#define FOLD(x) fsink += _mm256_cvtss_f32(x)
    PEAK_LOOP(__m256, _mm256_set1_ps(fsrc + (float)k), STEP, FOLD, 8)
#undef STEP
#undef FOLD
}

__attribute__((target("avx2"))) static double peak_avx2_int(void)
{
    __m256i b = _mm256_set1_epi8((char)isrc);
#define STEP(x) _mm256_maddubs_epi16(x, b)
#define FOLD(x) sink += (uint64_t)_mm256_extract_epi32(x, 0)
    PEAK_LOOP(__m256i, _mm256_set1_epi8((char)(isrc + k)), STEP, FOLD, 32)
#undef STEP
#undef FOLD
}

__attribute__((target("avx512f"))) static double peak_avx512_float(void)
{
    __m512 b = _mm512_set1_ps(fsrc * 0.999f), c = _mm512_set1_ps(fsrc * 1e-9f);
#define STEP(x) _mm512_fmadd_ps(x, b, c)
#define FOLD(x) fsink += _mm512_reduce_add_ps(x)
    PEAK_LOOP(__m512, _mm512_set1_ps(fsrc + (float)k), STEP, FOLD, 16)
#undef STEP
#undef FOLD
}

__attribute__((target("avx512f,avx512vnni"))) static double peak_avx512_int(void)
{
    __m512i b = _mm512_set1_epi8((char)isrc), c = _mm512_set1_epi8((char)(isrc + 1));
#define STEP(x) _mm512_dpbusd_epi32(x, b, c)
#define FOLD(x) sink += (uint64_t)_mm512_reduce_add_epi32(x)
    PEAK_LOOP(__m512i, _mm512_set1_epi32(isrc + k), STEP, FOLD, 64)
#undef STEP
#undef FOLD
}
#endif

/* Peak MACs/ns of the float and the int8 instruction of `level`. */
static void peaks(cm_simd_level level, double *pf, double *pi)
{
    switch (level) {
#if defined(__x86_64__)
    case CM_SIMD_AVX512: *pf = peak_avx512_float(); *pi = peak_avx512_int(); return;
    case CM_SIMD_AVX2: *pf = peak_avx2_float(); *pi = peak_avx2_int(); return;
#endif
    default: *pf = peak_scalar_float(); *pi = peak_scalar_int(); return;
    }
}

static double bandwidth(size_t bytes, double min_time)
{
    uint64_t *buf = cm_aligned_alloc(64, bytes);
    size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
    double t0 = cm_now(), t;
    size_t reps = 0;
    do {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (size_t i = 0; i < n; i += 4) {
            s0 += buf[i];
            s1 += buf[i + 1];
            s2 += buf[i + 2];
            s3 += buf[i + 3];
        }
        sink += s0 + s1 + s2 + s3;
        reps++;
        t = cm_now() - t0;
    } while (t < min_time);
    cm_free(buf);
    return (double)bytes * reps / t;
}

/* Random 128-byte rows (two cache lines, one an 8-bit centroid row) read from a table
 * of `bytes`, each fetched `ahead` rows before it is summed: the rate at which the
 * search's gathers (centroid rows, documents' first lines, refinement's slot map) can
 * run at best when their addresses are known that far ahead. Rows per second. */
static double random_rows(size_t bytes, uint32_t ahead, double min_time)
{
    uint8_t *buf = cm_aligned_alloc(64, bytes);
    size_t n_rows = bytes / 128, n = 1 << 16;
    uint32_t *id = cm_malloc(n * sizeof *id);
    memset(buf, 1, bytes);
    cm_rng r;
    cm_rng_seed(&r, 7, 0);
    for (size_t i = 0; i < n; i++) id[i] = (uint32_t)cm_rng_below(&r, n_rows);
    double t0 = cm_now(), t;
    size_t reps = 0;
    do {
        uint64_t s = 0;
        for (size_t i = 0; i < n; i++) {
            if (i + ahead < n) {
                const uint8_t *f = buf + (size_t)id[i + ahead] * 128;
                __builtin_prefetch(f);
                __builtin_prefetch(f + 64);
            }
            const uint64_t *row = (const uint64_t *)(const void *)(buf + (size_t)id[i] * 128);
            for (int w = 0; w < 16; w++) s += row[w];
        }
        sink += s;
        reps++;
        t = cm_now() - t0;
    } while (t < min_time);
    cm_free(id);
    cm_free(buf);
    return (double)n * reps / t;
}

static void unit_gauss(cm_rng *r, float *x, uint32_t d)
{
    double s = 0;
    for (uint32_t i = 0; i < d; i++) {
        x[i] = (float)cm_rng_gauss(r);
        s += (double)x[i] * x[i];
    }
    for (uint32_t i = 0; i < d; i++) x[i] = (float)(x[i] / sqrt(s));
}

static void near(cm_rng *r, const float *c, float sigma, float *x, uint32_t d)
{
    double s = 0;
    for (uint32_t i = 0; i < d; i++) {
        x[i] = c[i] + sigma * (float)cm_rng_gauss(r) / sqrtf((float)d);
        s += (double)x[i] * x[i];
    }
    for (uint32_t i = 0; i < d; i++) x[i] = (float)(x[i] / sqrt(s));
}

static double dotd(const float *a, const float *b, uint32_t d)
{
    double s = 0;
    for (uint32_t i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}

static void error_table(void)
{
    enum { NT = 2000, NQ = 16, NC = 16 };
    quant_rotation rot;
    quant_rotation_init(&rot, D, 1, NULL);
    cm_rng r;
    cm_rng_seed(&r, 5, 0);
    float *cent = cm_malloc(NC * D * 4), *tok = cm_malloc(NT * D * 4), *q = cm_malloc(NQ * D * 4);
    float *crot = cm_malloc(NC * D * 4), *vrot = cm_malloc(NT * D * 4);
    uint32_t *cid = cm_malloc(NT * 4);
    for (int k = 0; k < NC; k++) unit_gauss(&r, cent + k * D, D);
    for (int t = 0; t < NT; t++) {
        cid[t] = (uint32_t)cm_rng_below(&r, NC);
        near(&r, cent + cid[t] * D, 0.6f, tok + t * D, D);
    }
    for (int j = 0; j < NQ; j++) near(&r, cent + cm_rng_below(&r, NC) * D, 0.6f, q + j * D, D);
    quant_rotate_n(&rot, NC, cent, D, crot, D);
    quant_rotate_n(&rot, NT, tok, D, vrot, D);
    quant_qset qs;
    quant_qset_init(&qs, D, NQ, NULL);
    quant_qset_set(&qs, &rot, q, NQ);
    void *work = cm_aligned_alloc(64, quant_encode_work_bytes(D));
    uint8_t c1[D / 8], cB[D];
    quant_f1 f1;
    quant_fB fB;
    printf("\nestimator error of <q,v>, d=128, clustered unit vectors (|r| ~ 0.5), %d tokens x %d "
           "queries\n",
           NT, NQ);
    printf("%-10s %10s %10s %11s %9s %11s %12s\n", "code", "mean|err|", "rmse", "bias",
           "miss1.9", "rmse(f64)", "rmse(k f16)");
    /* 0: the 1-bit plane via popcount; 9, 10: B = 4 and B = 8 on the 8-bit query
     * (quant_estB_doc_max's default); 1-8: float dots */
    for (int bits = 0; bits <= 10; bits++) {
        uint32_t b = bits == 0 ? 1 : bits == 9 ? 4 : bits == 10 ? 8 : (uint32_t)bits;
        double sa = 0, s2 = 0, s = 0, miss = 0, s2x = 0, s2h = 0, n = 0;
        for (int t = 0; t < NT; t++) {
            quant_exact_factors x;
            quant_encode_one(D, b, vrot + t * D, crot + cid[t] * D, work, c1, &f1, cB, &fB, &x);
            float u[D];
            for (int i = 0; i < D; i++) u[i] = (float)qm_codeB_get(cB, b, i) - qm_codeB_offset(b);
            for (int j = 0; j < NQ; j++) {
                const float *qr = qs.q + j * D;
                double ex = dotd(q + j * D, tok + t * D, D), qc = dotd(q + j * D, cent + cid[t] * D, D);
                double g = 0;
                for (int i = 0; i < D; i++) g += (qr[i] - crot[cid[t] * D + i]) * (double)(qr[i] - crot[cid[t] * D + i]);
                g = sqrt(g);
                double est, estx, esth, ferr;
                if (bits == 0) {
                    uint32_t ws, pc;
                    quant_kernels_for(CM_SIMD_SCALAR)->ip1_pop(qs.planes + j * 4 * 2, 2, c1, 1, &ws, &pc);
                    float ip = qm_pop_ip(qs.delta[j], qs.vlow[j], D, qs.sum_qu[j], ws, pc);
                    est = qm_est1((float)qc, &f1, ip);
                    estx = qc + x.alpha1 + x.kappa1 * ip;
                    esth = est;
                    ferr = qm_f16_to_f32(f1.f_error);
                } else {
                    double ip = 0;
                    if (bits >= 9) { /* the integer definition of docB_q8_max (kernels.h) */
                        int32_t c = b <= 4 ? 8 : 128, a = 0, st = 0;
                        for (int i = 0; i < D; i++) {
                            int32_t tv = (int32_t)qm_codeB_get(cB, b, (uint32_t)i);
                            a += (tv - c) * (int32_t)qs.q8_t[((size_t)(i / 4) * qs.m_pad + j) * 4 + i % 4];
                            st += tv;
                        }
                        float off = qm_codeB_offset(b);
                        ip = qm_q8_ip(qs.q8_delta[j], qs.q8_lo[j], ((float)c - off) * (float)qs.q8_sum[j],
                                      a, (float)st - off * (float)D);
                    } else {
                        for (int i = 0; i < D; i++) ip += (double)u[i] * qr[i];
                    }
                    est = qm_estB((float)qc, &fB, (float)ip);
                    estx = qc + x.alphaB + x.kappaB * ip;
                    esth = qc + qm_f16_to_f32(fB.alpha) + cm_f16_to_f32(cm_f32_to_f16(fB.kappa)) * ip;
                    ferr = qm_f16_to_f32(fB.f_error);
                }
                double e = est - ex;
                sa += fabs(e);
                s2 += e * e;
                s += e;
                s2x += (estx - ex) * (estx - ex);
                s2h += (esth - ex) * (esth - ex);
                miss += fabs(e) > qm_bound((float)ferr, (float)g, QM_EPS0);
                n++;
            }
        }
        char name[16];
        snprintf(name, sizeof name,
                 bits == 0 ? "1-bit pop" : bits == 9 ? "B=4 q8" : bits == 10 ? "B=8 q8" : "B=%d", bits);
        printf("%-10s %10.3e %10.3e %+11.2e %9.4f %11.3e %12.3e\n", name, sa / n,
               sqrt(s2 / n), s / n, miss / n, sqrt(s2x / n), sqrt(s2h / n));
    }
    printf("encoder alone (quant_encode, %d tokens):", NT);
    for (uint32_t b = 1; b <= 8; b++) {
        uint8_t *o1 = cm_malloc(NT * D / 8), *oB = cm_malloc(NT * D);
        quant_f1 *p1 = cm_malloc(NT * sizeof *p1);
        quant_fB *pB = cm_malloc(NT * sizeof *pB);
        double t0 = cm_now();
        quant_encode(D, b, NT, vrot, crot, cid, o1, p1, oB, pB, NULL);
        printf(" B=%u %.1f us", b, (cm_now() - t0) / NT * 1e6);
        cm_free(o1);
        cm_free(oB);
        cm_free(p1);
        cm_free(pB);
    }
    printf("/token\n");
    printf("(rmse: factors as stored; rmse(f64): unrounded factors; rmse(k f16): kappa "
           "also rounded to f16)\n");
    cm_free(work);
    quant_qset_free(&qs);
    cm_free(cent);
    cm_free(tok);
    cm_free(q);
    cm_free(crot);
    cm_free(vrot);
    cm_free(cid);
}

typedef struct bench_ctx {
    const quant_kernels *k;
    quant_qset *qs;
    size_t n_list, n_doc;
    uint8_t *c1, *cB4, *cB8;
    quant_f1 *f1;
    quant_fB *fB;
    uint32_t *cid;
    float *S, *out;
} bench_ctx;

static void report(const char *kernel, const char *var, double sec, size_t tokens, size_t bytes,
                   double bw)
{
    double ns = sec / tokens * 1e9, gbs = bytes / sec / 1e9;
    printf("%-34s %-7s %9.2f %9.2f %7.0f%%\n", kernel, var, ns, gbs, 100.0 * gbs * 1e9 / bw);
}

/* Seconds per run of stmt: the best of 3 rounds of >= 0.1 s each, in the thread's CPU
 * time, so that other work on a shared machine inflates the numbers as little as it can
 * (cache and memory-bandwidth sharing still do). */
#define TIME(stmt, out_sec)                                                                    \
    do {                                                                                       \
        out_sec = 1e30;                                                                        \
        for (int round_ = 0; round_ < 3; round_++) {                                           \
            double t0_ = cm_thread_cpu_now(), t_;                                              \
            size_t reps_ = 0;                                                                  \
            do {                                                                               \
                stmt;                                                                          \
                reps_++;                                                                       \
                t_ = cm_thread_cpu_now() - t0_;                                                \
            } while (t_ < 0.1);                                                                \
            if (t_ / reps_ < out_sec) out_sec = t_ / reps_;                                    \
        }                                                                                      \
    } while (0)

/* The B = 4 doc shape per (document token x query token) pair, against the peak of the
 * instruction it is built on. MACs per pair: D (one per dim). */
static void pair_table(quant_qset *qs, const uint8_t *cB4, const quant_fB *fB, const uint8_t *c1,
                       const quant_f1 *f1, const uint32_t *cid, const float *S, size_t n_doc)
{
    printf("\ndoc shapes per (doc token x query token) pair, d=%d, m=%d; GMAC/s counts d "
           "multiply-adds per pair:\n", D, M);
    printf("%-7s %-26s %9s %9s %11s %9s\n", "variant", "form", "ns/pair", "GMAC/s",
           "peak GMAC/s", "of peak");
    const cm_simd_level levels[] = {CM_SIMD_SCALAR, CM_SIMD_AVX2, CM_SIMD_AVX512};
    float mx[M];
    int32_t *ia = cm_malloc((size_t)DOC_LEN * M * 4), ist[DOC_LEN];
    float *ipb = cm_malloc((size_t)DOC_LEN * M * 4);
    for (int l = 0; l < 3; l++) {
        if (!cm_cpu_supports(levels[l])) continue;
        const quant_kernels *k = quant_kernels_for(levels[l]);
        double pf, pi, sec;
        peaks(levels[l], &pf, &pi);
        for (int j = 0; j < M; j++) mx[j] = -INFINITY;
        struct {
            const char *form;
            int integer;
            double sec;
        } row[6];
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN)
                 k->ipB_multi(qs->q, M, D, 4, cB4 + t * D / 2, DOC_LEN, ipb),
             sec);
        row[0].form = "B=4 float dot (raw)", row[0].integer = 0, row[0].sec = sec;
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_estB_doc_max_float(
                 k, qs, 4, cB4 + t * D / 2, fB + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        row[1].form = "B=4 float dot + estimate", row[1].integer = 0, row[1].sec = sec;
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN)
                 k->ipB4_q8(qs->q8_t, qs->m_pad, M, D, cB4 + t * D / 2, DOC_LEN, ia, ist),
             sec);
        row[2].form = "B=4 int8 query (raw)", row[2].integer = 1, row[2].sec = sec;
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_estB_doc_max_q8(
                 k, qs, 4, cB4 + t * D / 2, fB + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        row[3].form = "B=4 int8 query + estimate", row[3].integer = 1, row[3].sec = sec;
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_est1_doc_max_lut(
                 k, qs, c1 + t * D / 8, f1 + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        row[4].form = "1-bit, float LUT + est.", row[4].integer = -1, row[4].sec = sec;
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_est1_doc_max_q8(
                 k, qs, c1 + t * D / 8, f1 + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        row[5].form = "1-bit, int8 query + est.", row[5].integer = 1, row[5].sec = sec;
        for (int i = 0; i < 6; i++) {
            double pairs = (double)n_doc * M, ns = row[i].sec / pairs * 1e9;
            double gmac = pairs * D / row[i].sec / 1e9, peak = row[i].integer > 0 ? pi : pf;
            if (row[i].integer < 0) /* table adds, not multiply-adds: no peak to compare */
                printf("%-7s %-26s %9.3f %9s %11s %9s\n", k->name, row[i].form, ns, "-", "-", "-");
            else
                printf("%-7s %-26s %9.3f %9.1f %11.1f %8.0f%%\n", k->name, row[i].form, ns, gmac,
                       peak, 100.0 * gmac / peak);
        }
    }
    fsink += mx[0] + ipb[0];
    sink += (uint64_t)ia[0];
    cm_free(ia);
    cm_free(ipb);
}

int main(int argc, char **argv)
{
    size_t n_list = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)1 << 20;
    size_t n_doc = (size_t)1 << 16;
    printf("bench_quant: d=%d, m=%d query tokens, list n=%zu, doc-shape n=%zu (docs of %d), "
           "cpu level %s\n",
           D, M, n_list, n_doc, DOC_LEN, cm_simd_level_name(cm_simd_level_get()));
    double bw_dram = bandwidth((size_t)256 << 20, 1.0), bw_l2 = bandwidth((size_t)256 << 10, 0.5);
    printf("streaming read: %.1f GB/s (256 MiB buffer), %.1f GB/s (256 KiB buffer)\n",
           bw_dram / 1e9, bw_l2 / 1e9);
    printf("random 128-byte rows of a 256 MiB table, ns a row: %.1f (no prefetch), %.1f "
           "(fetched 8 rows ahead), %.1f (16 ahead), %.1f (32 ahead); of a 12 MiB table "
           "(an 8-bit centroid table at K = 10^5) 16 ahead: %.1f\n",
           1e9 / random_rows((size_t)256 << 20, 0, 0.5), 1e9 / random_rows((size_t)256 << 20, 8, 0.5),
           1e9 / random_rows((size_t)256 << 20, 16, 0.5), 1e9 / random_rows((size_t)256 << 20, 32, 0.5),
           1e9 / random_rows((size_t)12 << 20, 16, 0.5));

    cm_rng r;
    cm_rng_seed(&r, 1, 0);
    uint8_t *c1 = cm_aligned_alloc(64, n_list * D / 8), *cB4 = cm_aligned_alloc(64, n_doc * D / 2),
            *cB8 = cm_aligned_alloc(64, n_doc * D);
    for (size_t i = 0; i < n_list * D / 8; i++) c1[i] = (uint8_t)cm_rng_next(&r);
    for (size_t i = 0; i < n_doc * D / 2; i++) cB4[i] = (uint8_t)cm_rng_next(&r);
    for (size_t i = 0; i < n_doc * D; i++) cB8[i] = (uint8_t)cm_rng_next(&r);
    quant_f1 *f1 = cm_malloc(n_list * sizeof *f1);
    quant_fB *fB = cm_malloc(n_doc * sizeof *fB);
    for (size_t i = 0; i < n_list; i++) {
        f1[i].kappa = cm_f32_to_f16(0.1f);
        f1[i].alpha = cm_f32_to_f16(0.01f);
        f1[i].f_error = cm_f32_to_f16(0.01f);
    }
    for (size_t i = 0; i < n_doc; i++) {
        fB[i].kappa = 0.01f;
        fB[i].alpha = cm_f32_to_f16(0.001f);
        fB[i].f_error = 0;
    }
    uint32_t *cid = cm_malloc(n_doc * 4);
    enum { K = 4096 };
    float *S = cm_malloc((size_t)K * M * 4), *out = cm_malloc(n_list * 4);
    for (size_t i = 0; i < n_doc; i++) cid[i] = (uint32_t)cm_rng_below(&r, K);
    for (size_t i = 0; i < (size_t)K * M; i++) S[i] = (float)cm_rng_uniform(&r);
    quant_rotation rot;
    quant_rotation_init(&rot, D, 3, NULL);
    float q[M * D];
    for (int i = 0; i < M * D; i++) q[i] = (float)cm_rng_gauss(&r);
    quant_qset qs;
    quant_qset_init(&qs, D, M, NULL);
    quant_qset_set(&qs, &rot, q, M);

    printf("\n%-34s %-7s %9s %9s %8s\n", "kernel (est incl. factors)", "variant", "ns/token",
           "GB/s", "of DRAM");
    const cm_simd_level levels[] = {CM_SIMD_SCALAR, CM_SIMD_AVX2, CM_SIMD_AVX512};
    size_t b1 = D / 8 + sizeof(quant_f1);
    for (int l = 0; l < 3; l++) {
        if (!cm_cpu_supports(levels[l])) {
            printf("%-34s %-7s skipped: not supported by this CPU\n", "all", cm_simd_level_name(levels[l]));
            continue;
        }
        const quant_kernels *k = quant_kernels_for(levels[l]);
        double sec;
        TIME(quant_est1_list_lut(k, &qs, 0, c1, f1, n_list, 0.5f, out), sec);
        report("1-bit list, float LUT", k->name, sec, n_list, n_list * b1, bw_dram);
        TIME(quant_est1_list_pop(k, &qs, 0, c1, f1, n_list, 0.5f, out), sec);
        report("1-bit list, popcount (4-bit q)", k->name, sec, n_list, n_list * b1, bw_dram);
        float mx[M];
        for (int j = 0; j < M; j++) mx[j] = -INFINITY;
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_est1_doc_max_pop(
                 k, &qs, c1 + t * D / 8, f1 + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        report("1-bit doc x32 q, popcount", k->name, sec, n_doc, n_doc * (b1 + 4), bw_dram);
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_est1_doc_max_lut(
                 k, &qs, c1 + t * D / 8, f1 + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        report("1-bit doc x32 q, interleaved LUT", k->name, sec, n_doc, n_doc * (b1 + 4), bw_dram);
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_est1_doc_max_q8(
                 k, &qs, c1 + t * D / 8, f1 + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        report("1-bit doc x32 q, int8 query", k->name, sec, n_doc, n_doc * (b1 + 4), bw_dram);
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_estB_doc_max_float(
                 k, &qs, 4, cB4 + t * D / 2, fB + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        report("B=4 doc x32 q, float dot", k->name, sec, n_doc, n_doc * (D / 2 + 8 + 4), bw_dram);
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_estB_doc_max_float(
                 k, &qs, 8, cB8 + t * D, fB + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        report("B=8 doc x32 q, float dot", k->name, sec, n_doc, n_doc * (D + 8 + 4), bw_dram);
        /* The raw kernels alone (no factor arithmetic), where the SIMD levels differ. */
        uint32_t *ws = (uint32_t *)(void *)out, *pc = ws + n_list / 2;
        for (uint32_t W = 1; W <= 4; W *= 2) { /* d = 64, 128, 256 */
            size_t nt = n_list / 2 / W;
            char name[48];
            snprintf(name, sizeof name, "raw ip1_pop, d=%u", 64 * W);
            TIME(k->ip1_pop(qs.planes, W, c1, nt, ws, pc), sec);
            report(name, k->name, sec, nt, nt * 8 * W, bw_dram);
        }
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_estB_doc_max_q8(
                 k, &qs, 4, cB4 + t * D / 2, fB + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        report("B=4 doc x32 q, int8 query", k->name, sec, n_doc, n_doc * (D / 2 + 8 + 4), bw_dram);
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN) quant_estB_doc_max_q8(
                 k, &qs, 8, cB8 + t * D, fB + t, DOC_LEN, cid + t, S, M, mx),
             sec);
        report("B=8 doc x32 q, int8 query", k->name, sec, n_doc, n_doc * (D + 8 + 4), bw_dram);
        float *ipb = cm_malloc((size_t)DOC_LEN * M * 4);
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN)
                 k->ipB_multi(qs.q, M, D, 4, cB4 + t * D / 2, DOC_LEN, ipb),
             sec);
        report("raw ipB_multi x32 q, B=4", k->name, sec, n_doc, n_doc * D / 2, bw_dram);
        int32_t *ia = cm_malloc((size_t)DOC_LEN * M * 4), ist[DOC_LEN];
        TIME(for (size_t t = 0; t < n_doc; t += DOC_LEN)
                 k->ipB4_q8(qs.q8_t, qs.m_pad, M, D, cB4 + t * D / 2, DOC_LEN, ia, ist),
             sec);
        report("raw ipB4_q8 x32 q, B=4", k->name, sec, n_doc, n_doc * D / 2, bw_dram);
        sink += (uint64_t)ia[0];
        cm_free(ia);
        fsink += mx[0] + out[n_list - 1] + ipb[0];
        cm_free(ipb);
    }
    printf("(GB/s: code + factor (+ centroid id) bytes read per second; doc shapes are "
           "compute-bound by design: 32 query tokens per token read)\n");
    pair_table(&qs, cB4, fB, c1, f1, cid, S, n_doc);
    error_table();
    quant_qset_free(&qs);
    cm_free(c1);
    cm_free(cB4);
    cm_free(cB8);
    cm_free(f1);
    cm_free(fB);
    cm_free(cid);
    cm_free(S);
    cm_free(out);
    return 0;
}
