/* The random orthogonal rotation P shared by an index (docs/algorithms.md §1.1).
 *
 * P acts on R^dim_pad, dim_pad = dim rounded up to a multiple of 64 (inputs are
 * zero-padded). When dim_pad is a power of two, P is 4 rounds of x <- H (S_k x)/sqrt(n)
 * (S_k a random sign diagonal, H the Walsh-Hadamard butterfly). Otherwise (dim_pad = 192,
 * 320, ...) it is the FhtKac scheme: each round flips signs, applies the normalised FHT
 * to the first (even rounds) or last (odd rounds) 2^m coordinates, 2^m the largest power
 * of two <= dim_pad, then a normalised butterfly between the two halves.
 * Padding to the next power of two instead would cost up to 33% more code bytes at
 * d = 192 and 60% at d = 320 on the GPU, whose memory bounds the index; FhtKac mixes as
 * well at the same O(d log d) cost. For d = 96 (-> 128) and 200 (-> 256) both agree.
 *
 * The state is a plain struct of fixed-width fields with the sign bits inline (no heap),
 * so it is copied, stored and compared as bytes; quant_rotation_serialize() gives the
 * little-endian on-disk form. The signs are drawn from core/rng.h with the given seed,
 * but the stored bits, not the seed, define P (a reader never regenerates them). */
#ifndef CHIMERA_QUANT_ROTATION_H
#define CHIMERA_QUANT_ROTATION_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"

#define QUANT_ROT_ROUNDS 4
#define QUANT_DIM_MAX 4096 /* largest padded dimension */

enum quant_rot_kind {
    QUANT_ROT_FHT = 1,     /* dim_pad a power of two */
    QUANT_ROT_FHT_KAC = 2, /* dim_pad a multiple of 64, not a power of two */
};

typedef struct quant_rotation {
    uint32_t dim;      /* input dimension */
    uint32_t dim_pad;  /* round_up(dim, 64) */
    uint32_t kind;     /* enum quant_rot_kind */
    uint32_t n_rounds; /* QUANT_ROT_ROUNDS */
    uint64_t seed;     /* informational: the seed the signs were drawn with */
    /* Round k negates coordinate i when bit (i % 8) of signs[k * dim_pad/8 + i/8] is 1. */
    uint8_t signs[QUANT_ROT_ROUNDS * QUANT_DIM_MAX / 8];
} quant_rotation;

/* Draws the rotation for `dim` (1..QUANT_DIM_MAX) from `seed`.
 * Returns CHIMERA_OK or CHIMERA_ERR_INVALID_ARG (dim out of range). */
chimera_status quant_rotation_init(quant_rotation *rot, uint32_t dim, uint64_t seed,
                                   chimera_error *err);

/* dim rounded up to a multiple of 64. */
uint32_t quant_dim_pad(uint32_t dim);

/* out[dim_pad] = P x, x has rot->dim floats (out may not alias x). */
void quant_rotate(const quant_rotation *rot, const float *x, float *out);

/* out[dim] = the first dim coordinates of P^T y, y has dim_pad floats: the inverse of
 * quant_rotate for vectors of the padded space (y may alias nothing it writes). */
void quant_unrotate(const quant_rotation *rot, const float *y, float *out);

/* n rows: out + i*ldo = P (x + i*ldx). */
void quant_rotate_n(const quant_rotation *rot, size_t n, const float *x, size_t ldx,
                    float *out, size_t ldo);

/* Serialised form: "CMRT", u32 version (1), u32 dim, dim_pad, kind, n_rounds, u64 seed,
 * then n_rounds*dim_pad/8 sign bytes; all little-endian. */
size_t quant_rotation_serialized_size(const quant_rotation *rot);
void quant_rotation_serialize(const quant_rotation *rot, uint8_t *buf);

/* Parses and validates a serialised rotation. Returns CHIMERA_OK, or
 * CHIMERA_ERR_CORRUPT (bad magic, inconsistent fields, wrong length) or
 * CHIMERA_ERR_VERSION, with the reason in err. */
chimera_status quant_rotation_deserialize(quant_rotation *rot, const uint8_t *buf, size_t len,
                                          chimera_error *err);

#endif
