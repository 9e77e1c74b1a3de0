/* Extended RaBitQ encoder and query-set preparation (Gao & Long, SIGMOD 2024, sections
 * 3.1-3.2; Gao et al., SIGMOD 2025, section 3 "rescale search"; docs/algorithms.md
 * §1.2-1.5).
 *
 * Encoding works in rotated space: r = v' - c', o = r/|r|, b_i = [r_i > 0] (one sign
 * rule everywhere; docs/algorithms.md §1.4). The magnitude code e_i in 0..2^(B-1)-1
 * maximises the cosine between (e + 1/2) and |o| over codes of the form
 * e_i = min(floor(t |o_i|), 2^(B-1)-1), t > 0. Departure (docs/algorithms.md §1.3):
 * the search starts at t -> 0 (every e_i = 0, which is the 1-bit code), walks all
 * events t = k/|o_i| (k = 1..2^(B-1)-1) in increasing order, so each coordinate is
 * capped at 2^(B-1)-1, and scores the clamped codes, so it is exact over that family;
 * the library's start at t_end * T[b_ex] with unclamped scoring is slightly sub-optimal
 * (cos 0.9935 vs 0.9947 at B = 4). The codes of the best step are counted from the
 * sorted events rather than re-rounded as floor(t |o_i|), which could land on the other
 * side of an event by floating-point rounding.
 * Cost: d * (2^(B-1)-1) events per token (~900 at d = 128, B = 4), sorted by a radix
 * sort and walked once (section below; it replaced a min-heap walk ~10x slower, with the
 * same codes); for B >= 5 a window around the optimum is walked first (rescale_search).
 * The fast-mode constant t (docs/algorithms.md §1.3) is not offered: the search costs a
 * few us per token (bench/bench_quant.c).
 *
 * Factors (similarity form, docs/algorithms.md §1.5) are computed in double from the codes
 * actually stored, then rounded to the storage types of quant_math.h. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/f16.h"
#include "quant/rabitq.h"
#include "core/alloc.h"

/* ---- rescale search ----
 * The events t = k / a_i (k = 1..emax, a_i > 0) are sorted once and walked in order;
 * the walk is the same as a min-heap's pops (each coordinate's events are increasing in
 * k, so the heap's order is the sorted order of all events by (t, i)), so the codes and
 * factors are those of the heap walk bit for bit, at a fraction of its cost: the heap
 * took ~150 ns per event (log d branchy sift steps, a mispredict each), ~70-100 us per
 * token at B = 4. Sort: an event is one uint64, the upper 32 bits of the double t (for
 * t > 0 they order like t) above the payload i << 8 | k; an LSD radix sort on the top
 * 24 of those bits (ev_sort), then an insertion pass that orders the rare runs with equal
 * keys by the exact t = k / a_i (recomputed, the same division as the heap's) and i. */

#define EV_KEY(ev) ((uint32_t)((ev) >> 32))
#define EV_I(ev) ((uint32_t)(ev) >> 8)
#define EV_K(ev) ((uint32_t)(ev)&0xffu)

/* t >= 1 always (t = k / a_i with a_i <= 1), so the upper bits minus those of 1.0 are
 * the exponent offset and mantissa, and the radix key's top digit is zero for any
 * t < 2^16 (its pass is then skipped). */
static uint64_t ev_make(double t, uint32_t i, uint32_t k)
{
    uint64_t u;
    memcpy(&u, &t, sizeof u);
    return ((u - 0x3ff0000000000000ull) & 0xffffffff00000000ull) | (uint64_t)(i << 8 | k);
}

static double ev_t(const double *a, uint64_t ev) { return (double)EV_K(ev) / a[EV_I(ev)]; }

/* (t, i) order of two events with equal upper bits. */
static int ev_less(const double *a, uint64_t x, uint64_t y)
{
    double tx = ev_t(a, x), ty = ev_t(a, y);
    return tx < ty || (tx == ty && EV_I(x) < EV_I(y));
}

/* Sorts ev[0..n) by (t, i); tmp: n entries. Returns the sorted array (ev or tmp). The
 * radix key is the top 24 of the 32 upper bits (sign, exponent, 12 mantissa bits: a
 * relative resolution of 2^-12, so equal-key runs stay short); 3 passes of 8 bits keep
 * the histograms small, since at ~900 events their clearing and prefix sums would
 * otherwise cost as much as the scatter. */
static uint64_t *ev_sort(const double *a, uint64_t *ev, uint64_t *tmp, uint32_t n)
{
    uint32_t hist[3][256];
    memset(hist, 0, sizeof hist);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t key = EV_KEY(ev[k]);
        hist[0][(key >> 8) & 255]++;
        hist[1][(key >> 16) & 255]++;
        hist[2][key >> 24]++;
    }
    uint64_t *src = ev, *dst = tmp;
    for (int p = 0; p < 3; p++) {
        uint32_t *h = hist[p], sum = 0, shift = 8u + 8u * (uint32_t)p;
        if (h[(EV_KEY(src[0]) >> shift) & 255] == n) continue; /* one bucket: no-op pass */
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = h[b];
            h[b] = sum;
            sum += c;
        }
        for (uint32_t k = 0; k < n; k++) dst[h[(EV_KEY(src[k]) >> shift) & 255]++] = src[k];
        uint64_t *x = src;
        src = dst;
        dst = x;
    }
    for (uint32_t k = 1; k < n; k++) {
        uint64_t x = src[k];
        if (EV_KEY(src[k - 1]) >> 8 != EV_KEY(x) >> 8 || !ev_less(a, x, src[k - 1])) continue;
        uint32_t j = k;
        while (j > 0 && EV_KEY(src[j - 1]) >> 8 == EV_KEY(x) >> 8 && ev_less(a, x, src[j - 1])) {
            src[j] = src[j - 1];
            j--;
        }
        src[j] = x;
    }
    return src;
}

/* Walks the events with t in (t_lo, t_hi] in increasing t, starting from the codes at
 * t_lo, and returns the step with the best cosine (0: t_lo itself; n: the last event); the
 * codes at that step are the start codes plus the counts of each coordinate in the first
 * best_step events (no re-rounding of floor(t a_i), which could land on the other side
 * of an event). t_lo = 0, t_hi = inf is the exhaustive walk. *n_out: events walked. */
static uint64_t rescale_walk(const double *a, uint32_t d, unsigned emax, double t_lo,
                             double t_hi, uint8_t *e, uint64_t *ev, uint64_t *tmp,
                             uint32_t *n_out)
{
    uint32_t n = 0;
    double num = 0.0, den = 0.0;
    for (uint32_t i = 0; i < d; i++) {
        double f = floor(t_lo * a[i]);
        unsigned e0 = f >= (double)emax ? emax : (unsigned)f;
        e[i] = (uint8_t)e0;
        num += (e0 + 0.5) * a[i];
        den += (e0 + 0.5) * (e0 + 0.5);
        if (a[i] > 0.0)
            for (uint32_t k = e0 + 1; k <= emax; k++) {
                double t = (double)k / a[i];
                if (t > t_hi) break;
                ev[n++] = ev_make(t, i, k);
            }
    }
    *n_out = n;
    uint8_t e0[QUANT_DIM_MAX];
    memcpy(e0, e, d);
    if (n == 0) return 0;
    uint64_t *s = ev_sort(a, ev, tmp, n);
    /* cos = num / sqrt(den) with num > 0: compared as num^2 * den_best > num_best^2 * den,
     * no division or square root per event (they were half the walk's time). */
    double best_n2 = num * num, best_den = den;
    uint64_t best_step = 0;
    for (uint32_t step = 0; step < n; step++) {
        uint32_t i = EV_I(s[step]);
        e[i]++;
        num += a[i];
        den += 2.0 * e[i];
        double n2 = num * num;
        if (n2 * best_den > best_n2 * den) {
            best_n2 = n2;
            best_den = den;
            best_step = step + 1;
        }
    }
    memcpy(e, e0, d);
    for (uint64_t k = 0; k < best_step; k++) e[EV_I(s[k])]++;
    return best_step;
}

/* The rescale search. For B >= 5 the exhaustive walk has d * (2^(B-1)-1) events (16,256
 * at d = 128, B = 8: ~0.4 ms per token), so it first walks a window t * max(a) in
 * [S * (emax + 10), emax + 10] and keeps its optimum when that lies strictly inside it;
 * an optimum on either edge means the window may have cut off a better t, and the
 * exhaustive walk decides. cos(t) is not unimodal (it has lesser peaks between events),
 * so an optimum inside the window is the exhaustive one only when the window holds the
 * best t. The reference library's starts S (0.59, 0.71, 0.75, 0.77 for B = 5..8) are for
 * its unclamped scoring; the clamped optimum lies lower, and with them 0.8% (B = 5, d_pad
 * 128) of codes kept a lesser peak inside the window. The best t of every token of three
 * corpora (d_pad 64, 128, 256; 0.13-0.76M tokens) lay at S >= 0.44, 0.56, 0.63, 0.67 (B =
 * 5..8, lowest at d_pad 64; bench/RESULTS.md section 2.3), so the starts sit ~0.1 below
 * those, and tests/test_quant.c checks hundreds of Gaussian residuals at every critical
 * t: exactness for B >= 5 is measured and tested, not proven. B <= 4 (896 events at
 * d_pad 128) always walks exhaustively. */
static void rescale_search(const double *a, uint32_t d, unsigned bex, uint8_t *e, uint64_t *ev,
                           uint64_t *tmp)
{
    static const double window_start[QUANT_BITS_MAX] = {0, 0, 0, 0, .34, .46, .53, .57};
    unsigned emax = (1u << bex) - 1u;
    uint32_t n;
    if (bex >= 4) {
        double amax = 0.0;
        for (uint32_t i = 0; i < d; i++) amax = a[i] > amax ? a[i] : amax;
        double t_hi = (emax + 10.0) / amax, t_lo = t_hi * window_start[bex];
        uint64_t best = rescale_walk(a, d, emax, t_lo, t_hi, e, ev, tmp, &n);
        if (best > 0 && best < n) return;
    }
    rescale_walk(a, d, emax, 0.0, INFINITY, e, ev, tmp, &n);
}

/* Layout of the work area: r, a (double), two event arrays of d * (2^(B-1) - 1) entries
 * (sized for B = 8: 2 KiB per dim, 256 KiB at dim_pad 128), codes. */
#define EV_PER_DIM ((1u << (QUANT_BITS_MAX - 1)) - 1u)

size_t quant_encode_work_bytes(uint32_t dim_pad)
{
    return (size_t)dim_pad * (2 * sizeof(double) + 2 * EV_PER_DIM * sizeof(uint64_t) + 1) + 64;
}

static uint16_t half(double x) { return cm_f32_to_f16((float)x); }

void quant_encode_one(uint32_t dim_pad, uint32_t bits, const float *v_rot, const float *c_rot,
                      void *work, uint8_t *code1, quant_f1 *f1, uint8_t *codeB, quant_fB *fB,
                      quant_exact_factors *exact)
{
    double *r = work, *a = r + dim_pad;
    uint64_t *ev = (uint64_t *)(a + dim_pad), *evt = ev + (size_t)dim_pad * EV_PER_DIM;
    uint8_t *e = (uint8_t *)(evt + (size_t)dim_pad * EV_PER_DIM);
    uint32_t d = dim_pad;

    double nr2 = 0.0, rc = 0.0;
    for (uint32_t i = 0; i < d; i++) {
        r[i] = (double)v_rot[i] - (double)c_rot[i];
        nr2 += r[i] * r[i];
        rc += r[i] * c_rot[i];
    }
    double nr = sqrt(nr2);
    memset(code1, 0, d / 8);
    for (uint32_t i = 0; i < d; i++)
        if (r[i] > 0.0) code1[i >> 3] |= (uint8_t)(1u << (i & 7));

    quant_exact_factors x;
    memset(&x, 0, sizeof x);
    x.norm_r = nr;
    if (!(nr > 1e-30)) {
        /* v == c: any code, zero factors; the estimate is exactly <q, c>. */
        memset(f1, 0, sizeof *f1);
        if (codeB) {
            memset(codeB, 0, qm_codeB_bytes(d, bits));
            memset(fB, 0, sizeof *fB);
        }
        x.cos1 = x.cosB = 1.0;
        if (exact) *exact = x;
        return;
    }
    for (uint32_t i = 0; i < d; i++) a[i] = fabs(r[i]) / nr;

    /* 1-bit: u = (b - 1/2), <u, o> = sum|o_i|/2, |u|^2 = d/4. */
    double ip1 = 0.0, uc1 = 0.0;
    for (uint32_t i = 0; i < d; i++) {
        ip1 += 0.5 * a[i];
        uc1 += (r[i] > 0.0 ? 0.5 : -0.5) * c_rot[i];
    }
    double tan2 = (0.25 * d) / (ip1 * ip1) - 1.0;
    x.kappa1 = nr / ip1;
    x.alpha1 = rc - x.kappa1 * uc1;
    x.cos1 = ip1 / sqrt(0.25 * d);
    x.f_error1 = nr * sqrt((tan2 > 0.0 ? tan2 : 0.0) / (d - 1));
    f1->kappa = half(x.kappa1);
    f1->alpha = half(x.alpha1);
    f1->f_error = half(x.f_error1);

    if (codeB) {
        unsigned bex = bits - 1, emax = (1u << bex) - 1u;
        if (bex > 0) {
            rescale_search(a, d, bex, e, ev, evt);
        } else {
            memset(e, 0, d);
        }
        double ipB = 0.0, un2 = 0.0, ucB = 0.0;
        memset(codeB, 0, qm_codeB_bytes(d, bits));
        for (uint32_t i = 0; i < d; i++) {
            unsigned b = r[i] > 0.0;
            unsigned t = b ? (1u << bex) + e[i] : emax - e[i];
            double y = e[i] + 0.5;
            ipB += y * a[i];
            un2 += y * y;
            ucB += (b ? y : -y) * c_rot[i];
            if (bits <= 4) codeB[i >> 1] |= (uint8_t)(t << ((i & 1) * 4));
            else codeB[i] = (uint8_t)t;
        }
        double tB = un2 / (ipB * ipB) - 1.0;
        x.kappaB = nr / ipB;
        x.alphaB = rc - x.kappaB * ucB;
        x.cosB = ipB / sqrt(un2);
        x.f_errorB = nr * sqrt((tB > 0.0 ? tB : 0.0) / (d - 1));
        fB->kappa = (float)x.kappaB;
        fB->alpha = half(x.alphaB);
        fB->f_error = half(x.f_errorB);
    }
    if (exact) *exact = x;
}

chimera_status quant_encode(uint32_t dim_pad, uint32_t bits, size_t n, const float *v_rot,
                            const float *c_rot, const uint32_t *cid, uint8_t *codes1,
                            quant_f1 *f1, uint8_t *codesB, quant_fB *fB, chimera_error *err)
{
    if (bits < 1 || bits > QUANT_BITS_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "encode: %u bits, expected 1..%d", bits,
                       QUANT_BITS_MAX);
    if (dim_pad == 0 || dim_pad % 64 || dim_pad > QUANT_DIM_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "encode: dim_pad %u invalid", dim_pad);
    void *work = cm_aligned_alloc(64, quant_encode_work_bytes(dim_pad));
    if (!work) return cm_fail(err, CHIMERA_ERR_NOMEM, "encode: out of memory");
    size_t c1 = qm_code1_bytes(dim_pad), cB = qm_codeB_bytes(dim_pad, bits);
    for (size_t i = 0; i < n; i++) {
        const float *c = c_rot + (size_t)(cid ? cid[i] : 0) * dim_pad;
        quant_encode_one(dim_pad, bits, v_rot + i * dim_pad, c, work, codes1 + i * c1, f1 + i,
                         codesB ? codesB + i * cB : NULL, codesB ? fB + i : NULL, NULL);
    }
    cm_free(work);
    return CHIMERA_OK;
}

void quant_codeB_msb(uint32_t dim_pad, uint32_t bits, size_t n, const uint8_t *codesB,
                     uint8_t *codes1)
{
    size_t c1 = qm_code1_bytes(dim_pad), cB = qm_codeB_bytes(dim_pad, bits);
    for (size_t t = 0; t < n; t++) {
        const uint8_t *src = codesB + t * cB;
        uint8_t *dst = codes1 + t * c1;
        memset(dst, 0, c1);
        for (uint32_t i = 0; i < dim_pad; i++)
            dst[i >> 3] |= (uint8_t)(((qm_codeB_get(src, bits, i) >> (bits - 1)) & 1u) << (i & 7));
    }
}

/* ---- query sets ---- */

chimera_status quant_qset_init(quant_qset *qs, uint32_t dim_pad, uint32_t m_cap,
                               chimera_error *err)
{
    memset(qs, 0, sizeof *qs);
    if (m_cap == 0 || m_cap > QUANT_QTOK_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "query set: %u tokens, expected 1..%d",
                       m_cap, QUANT_QTOK_MAX);
    if (dim_pad == 0 || dim_pad % 64 || dim_pad > QUANT_DIM_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "query set: dim_pad %u invalid", dim_pad);
    qs->dim_pad = dim_pad;
    qs->n_words = dim_pad / 64;
    qs->m_cap = m_cap;
    qs->m_pad = (m_cap + 7u) & ~7u;
    size_t mp = qs->m_pad;
    qs->q = cm_aligned_alloc(64, mp * dim_pad * sizeof(float));
    qs->lut = cm_aligned_alloc(64, mp * dim_pad * 4 * sizeof(float));
    qs->lut_t = cm_aligned_alloc(64, mp * dim_pad * 4 * sizeof(float));
    qs->planes = cm_aligned_alloc(64, mp * 4 * qs->n_words * sizeof(uint64_t));
    qs->planes_t = cm_aligned_alloc(64, mp * 4 * qs->n_words * sizeof(uint64_t));
    qs->delta = cm_aligned_alloc(64, mp * sizeof(float));
    qs->vlow = cm_aligned_alloc(64, mp * sizeof(float));
    qs->sum_qu = cm_aligned_alloc(64, mp * sizeof(int32_t));
    qs->q8_t = cm_aligned_alloc(64, mp * dim_pad);
    qs->q8_delta = cm_aligned_alloc(64, mp * sizeof(float));
    qs->q8_lo = cm_aligned_alloc(64, mp * sizeof(float));
    qs->q8_sum = cm_aligned_alloc(64, mp * sizeof(int32_t));
    qs->q8_pair = cm_aligned_alloc(64, (size_t)dim_pad * 16);
    if (!qs->q || !qs->lut || !qs->lut_t || !qs->planes || !qs->planes_t || !qs->delta || !qs->vlow ||
        !qs->sum_qu || !qs->q8_t || !qs->q8_delta || !qs->q8_lo || !qs->q8_sum || !qs->q8_pair) {
        quant_qset_free(qs);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "query set: out of memory");
    }
    /* zero until built: a set that never builds them (luts 0) holds no stale values */
    memset(qs->lut, 0, mp * dim_pad * 4 * sizeof(float));
    memset(qs->lut_t, 0, mp * dim_pad * 4 * sizeof(float));
    qs->luts = 1;
    return CHIMERA_OK;
}

void quant_qset_free(quant_qset *qs)
{
    cm_free(qs->q);
    cm_free(qs->lut);
    cm_free(qs->lut_t);
    cm_free(qs->planes);
    cm_free(qs->planes_t);
    cm_free(qs->delta);
    cm_free(qs->vlow);
    cm_free(qs->sum_qu);
    cm_free(qs->q8_t);
    cm_free(qs->q8_delta);
    cm_free(qs->q8_lo);
    cm_free(qs->q8_sum);
    cm_free(qs->q8_pair);
    memset(qs, 0, sizeof *qs);
}

/* Builds LUTs and planes from the rotated rows already in qs->q[0..m). */
static void qset_finish(quant_qset *qs, uint32_t m)
{
    uint32_t d = qs->dim_pad, W = qs->n_words;
    size_t mp = qs->m_pad;
    memset(qs->q + (size_t)m * d, 0, (mp - m) * d * sizeof(float));
    if (qs->luts) {
        memset(qs->lut, 0, mp * d * 4 * sizeof(float));
        memset(qs->lut_t, 0, mp * d * 4 * sizeof(float));
    }
    memset(qs->planes, 0, mp * 4 * W * sizeof(uint64_t));
    memset(qs->planes_t, 0, mp * 4 * W * sizeof(uint64_t));
    memset(qs->delta, 0, mp * sizeof(float));
    memset(qs->vlow, 0, mp * sizeof(float));
    memset(qs->sum_qu, 0, mp * sizeof(int32_t));
    memset(qs->q8_t, 0, mp * d);
    memset(qs->q8_delta, 0, mp * sizeof(float));
    memset(qs->q8_lo, 0, mp * sizeof(float));
    memset(qs->q8_sum, 0, mp * sizeof(int32_t));
    qs->m = m;
    for (uint32_t j = 0; j < m; j++) {
        const float *q = qs->q + (size_t)j * d;
        if (qs->luts) {
            qm_lut_build(q, d, qs->lut + (size_t)j * d * 4);
            qm_lut_interleave(qs->lut + (size_t)j * d * 4, d, j, (uint32_t)mp, qs->lut_t);
        }
        qm_query4(q, d, qs->planes + (size_t)j * 4 * W, 1, &qs->delta[j], &qs->vlow[j],
                  &qs->sum_qu[j]);
        qm_query8(q, d, j, (uint32_t)mp, qs->q8_t, &qs->q8_delta[j], &qs->q8_lo[j],
                  &qs->q8_sum[j]);
        /* The interleaved copy: word w of plane p of token j at [(w*4 + p) * m_pad + j]. */
        for (uint32_t p = 0; p < 4; p++)
            for (uint32_t w = 0; w < W; w++)
                qs->planes_t[((size_t)w * 4 + p) * mp + j] =
                    qs->planes[((size_t)j * 4 + p) * W + w];
    }
    memset(qs->q8_pair, 0, (size_t)d * 16);
    if (m <= 8)
        for (uint32_t g = 0; g < d / 4; g++)
            for (uint32_t j = 0; j < m; j++)
                for (uint32_t h = 0; h < 2; h++)
                    memcpy(qs->q8_pair + ((size_t)g * 16 + 2 * j + h) * 4,
                           qs->q8_t + ((size_t)g * mp + j) * 4, 4);
}

void quant_qset_set(quant_qset *qs, const quant_rotation *rot, const float *q, uint32_t m)
{
    for (uint32_t j = 0; j < m; j++)
        quant_rotate(rot, q + (size_t)j * rot->dim, qs->q + (size_t)j * qs->dim_pad);
    qset_finish(qs, m);
}
