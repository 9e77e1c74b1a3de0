/* Private to src/quant: the per-level tables and the per-token bodies that every variant
 * shares for its scalar parts and tails (the same source compiled with each file's ISA
 * flags; in *_avx2.c __builtin_popcountll becomes the POPCNT instruction). */
#ifndef CHIMERA_QUANT_KERNELS_IMPL_H
#define CHIMERA_QUANT_KERNELS_IMPL_H

#include <stddef.h>
#include <string.h>

#include "quant/kernels.h"

extern const quant_kernels quant_kernels_scalar;
extern const quant_kernels quant_kernels_avx2;
extern const quant_kernels quant_kernels_avx512;

/* Tokens per block of the doc-shape kernels' stack buffers (kernels.c). */
#define QUANT_DOC_BLOCK 8

static inline uint64_t qk_load64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* Popcount sums of one code against one query's planes [4][W]. */
static inline void qk_pop_one(const uint64_t *planes, uint32_t W, const uint8_t *code,
                              uint32_t *wsum, uint32_t *pop)
{
    uint32_t s = 0, c = 0;
    for (uint32_t w = 0; w < W; w++) {
        uint64_t b = qk_load64(code + 8 * w);
        c += (uint32_t)__builtin_popcountll(b);
        s += (uint32_t)__builtin_popcountll(b & planes[w]) +
             2u * (uint32_t)__builtin_popcountll(b & planes[W + w]) +
             4u * (uint32_t)__builtin_popcountll(b & planes[2 * W + w]) +
             8u * (uint32_t)__builtin_popcountll(b & planes[3 * W + w]);
    }
    *wsum = s;
    *pop = c;
}

/* est1_pop's SIMD variants fetch kappa and alpha as one 32-bit word at each token's
 * factors: kappa in its low half, alpha in its high half (little-endian). */
_Static_assert(offsetof(quant_f1, kappa) == 0 && offsetof(quant_f1, alpha) == 2,
               "est1_pop reads (kappa, alpha) as one little-endian word");

/* One token of est1_pop (kernels.h): qm_est1(qc, f, qm_pop_ip(...)), one operation a
 * statement. The SIMD variants' tails use it in files built with -mfma, where clang
 * (-ffp-contract=on) fuses a multiply and an add written in one expression into an FMA;
 * across statements it does not, so every variant rounds as scalar does. */
static inline float qk_est1_pop_one(uint32_t wsum, uint32_t pop, const quant_f1 *f, float qc,
                                    float delta, float vlow, uint32_t dim_pad, int32_t sum_qu)
{
    float hd = 0.5f * delta, hv = 0.5f * vlow;
    float a = hd * (float)(2 * (int32_t)wsum - sum_qu);
    float b = hv * (float)(2 * (int32_t)pop - (int32_t)dim_pad);
    float ip = a + b;
    float base = qc + qm_f16_to_f32(f->alpha);
    float slope = qm_f16_to_f32(f->kappa) * ip;
    return base + slope;
}

/* One code against queries [j0, j1) of the interleaved planes. */
static inline void qk_pop_multi_one(const uint64_t *pt, size_t mp, uint32_t j0, uint32_t j1,
                                    uint32_t W, const uint8_t *code, uint32_t *wsum)
{
    for (uint32_t j = j0; j < j1; j++) wsum[j] = 0;
    for (uint32_t w = 0; w < W; w++) {
        uint64_t b = qk_load64(code + 8 * w);
        const uint64_t *p = pt + (size_t)w * 4 * mp;
        for (uint32_t j = j0; j < j1; j++)
            wsum[j] += (uint32_t)__builtin_popcountll(b & p[j]) +
                       2u * (uint32_t)__builtin_popcountll(b & p[mp + j]) +
                       4u * (uint32_t)__builtin_popcountll(b & p[2 * mp + j]) +
                       8u * (uint32_t)__builtin_popcountll(b & p[3 * mp + j]);
    }
}

static inline uint32_t qk_popcount_code(const uint8_t *code, uint32_t W)
{
    uint32_t c = 0;
    for (uint32_t w = 0; w < W; w++) c += (uint32_t)__builtin_popcountll(qk_load64(code + 8 * w));
    return c;
}

/* u[i] = T_i - (2^B-1)/2 (exact in float: half-integers below 256). */
static inline void qk_unpackB(const uint8_t *code, uint32_t bits, uint32_t d, float *u)
{
    float off = qm_codeB_offset(bits);
    for (uint32_t i = 0; i < d; i++) u[i] = (float)qm_codeB_get(code, bits, i) - off;
}

/* Tokens per block of the 8-bit-query kernels: the block's codes, unpacked to one signed
 * byte per dim, sit in a stack buffer and every query group row loaded is used for all
 * of them. */
#define QUANT_Q8_BLOCK 8

/* The centre c of the signed code bytes the 8-bit-query kernels read (u_i = T_i - c):
 * 8 for nibble codes (B <= 4), 128 for byte codes (B = 5..8), so that u fits a signed
 * byte either way. */
static inline int32_t qk_q8_centre(uint32_t bits) { return bits <= 4 ? 8 : 128; }

/* A B-bit code as the 8-bit-query kernels read it (quant_math.h, qm_query8):
 * u[i] = T_i - qk_q8_centre(bits) as a signed byte. Returns sum_i T_i. */
static inline int32_t qk_unpackB_s8(const uint8_t *code, uint32_t bits, uint32_t dim_pad, int8_t *u)
{
    int32_t st = 0, c = qk_q8_centre(bits);
    for (uint32_t i = 0; i < dim_pad; i++) {
        unsigned t = qm_codeB_get(code, bits, i);
        u[i] = (int8_t)((int32_t)t - c);
        st += (int32_t)t;
    }
    return st;
}

/* A 1-bit plane likewise: u[i] = -b_i. Returns sum_i b_i. */
static inline int32_t qk_unpack1_s8(const uint8_t *code, uint32_t dim_pad, int8_t *u)
{
    int32_t st = 0;
    for (uint32_t i = 0; i < dim_pad; i++) {
        unsigned b = qm_code1_bit(code, i);
        u[i] = (int8_t)-(int)b;
        st += (int32_t)b;
    }
    return st;
}

#endif
