/* Randomised fast Hadamard rotation (RaBitQ's FhtKac rotator; docs/algorithms.md §1.1; Gao &
 * Long 2024 section 3.1.2 use a random orthogonal matrix, the FHT form is the
 * RaBitQ-Library's O(d log d) replacement).
 *
 * Departures: the normalisation is applied in every round (x/sqrt(n) folded into the
 * sign flip, 1/sqrt(2) into the Kac butterfly) rather than once at the end, so each round
 * is orthonormal on its own and intermediate values stay O(1) in float. Signs come from
 * core/rng.h (xoshiro256**) instead of std::random_device, so an index is reproducible
 * from its seed. Rotation runs at build time and once per query token, so it is scalar:
 * it is ~1% of a query's work (d log d flops versus n_tokens * d code reads). */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"
#include "core/rng.h"
#include "quant/rotation.h"
#include "core/alloc.h"

#define ROT_MAGIC "CMRT"
#define ROT_VERSION 1u
#define ROT_HEADER 32u

uint32_t quant_dim_pad(uint32_t dim) { return (dim + 63u) & ~63u; }

static int is_pow2(uint32_t x) { return x && !(x & (x - 1)); }

chimera_status quant_rotation_init(quant_rotation *rot, uint32_t dim, uint64_t seed,
                                   chimera_error *err)
{
    memset(rot, 0, sizeof *rot);
    if (dim == 0 || quant_dim_pad(dim) > QUANT_DIM_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "rotation: dimension %u out of range 1..%u", dim, QUANT_DIM_MAX);
    rot->dim = dim;
    rot->dim_pad = quant_dim_pad(dim);
    rot->kind = is_pow2(rot->dim_pad) ? QUANT_ROT_FHT : QUANT_ROT_FHT_KAC;
    rot->n_rounds = QUANT_ROT_ROUNDS;
    rot->seed = seed;
    cm_rng rng;
    cm_rng_seed(&rng, seed, 0x526f74u /* "Rot": a stream of its own */);
    size_t nbytes = (size_t)rot->n_rounds * rot->dim_pad / 8;
    for (size_t i = 0; i < nbytes; i += 8) {
        uint64_t x = cm_rng_next(&rng);
        for (size_t k = 0; k < 8 && i + k < nbytes; k++) rot->signs[i + k] = (uint8_t)(x >> (8 * k));
    }
    return CHIMERA_OK;
}

/* Unnormalised Walsh-Hadamard butterfly in natural order, n a power of two >= 64 (a
 * padded dimension). With SSE2 (every x86-64) four butterflies at a time: the first two
 * stages within each group of four by shuffles, the later ones across groups. Every
 * output is the same a + b or a - b of the same operands, in the same stage order, as
 * the scalar loop's, so both give the same bits (tests/test_quant.c checks them against
 * that loop); the SSE2 form is ~3x faster. */
static void fht(float *x, uint32_t n)
{
#if defined(__SSE2__)
    for (uint32_t i = 0; i < n; i += 4) {
        __m128 v = _mm_loadu_ps(x + i);
        /* h = 1: [x0 + x1, x0 - x1, x2 + x3, x2 - x3] */
        __m128 a = _mm_shuffle_ps(v, v, _MM_SHUFFLE(2, 2, 0, 0));
        __m128 b = _mm_shuffle_ps(v, v, _MM_SHUFFLE(3, 3, 1, 1));
        __m128 t = _mm_shuffle_ps(_mm_add_ps(a, b), _mm_sub_ps(a, b), _MM_SHUFFLE(2, 0, 2, 0));
        v = _mm_shuffle_ps(t, t, _MM_SHUFFLE(3, 1, 2, 0));
        /* h = 2: [y0 + y2, y1 + y3, y0 - y2, y1 - y3] */
        a = _mm_movelh_ps(v, v);
        b = _mm_movehl_ps(v, v);
        _mm_storeu_ps(x + i, _mm_shuffle_ps(_mm_add_ps(a, b), _mm_sub_ps(a, b),
                                            _MM_SHUFFLE(3, 2, 1, 0)));
    }
    for (uint32_t h = 4; h < n; h *= 2)
        for (uint32_t i = 0; i < n; i += 2 * h)
            for (uint32_t j = i; j < i + h; j += 4) {
                __m128 a = _mm_loadu_ps(x + j), b = _mm_loadu_ps(x + j + h);
                _mm_storeu_ps(x + j, _mm_add_ps(a, b));
                _mm_storeu_ps(x + j + h, _mm_sub_ps(a, b));
            }
#else
    for (uint32_t h = 1; h < n; h *= 2)
        for (uint32_t i = 0; i < n; i += 2 * h)
            for (uint32_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
#endif
}

/* x_i *= +-scale by sign bit i; n a multiple of 64. With SSE2 four at a time, the sign
 * applied by flipping the product's sign bit: (-scale) x and -(scale x) are the same
 * float, so both forms give the same bits. */
static void flip(float *x, const uint8_t *signs, uint32_t n, float scale)
{
#if defined(__SSE2__)
    const __m128i bit = _mm_setr_epi32(1, 2, 4, 8), sign = _mm_set1_epi32(INT32_MIN);
    const __m128 sc = _mm_set1_ps(scale);
    for (uint32_t i = 0; i < n; i += 4) {
        __m128i nib = _mm_set1_epi32((signs[i >> 3] >> (i & 7)) & 15);
        __m128i neg = _mm_and_si128(_mm_cmpeq_epi32(_mm_and_si128(nib, bit), bit), sign);
        __m128 v = _mm_mul_ps(_mm_loadu_ps(x + i), sc);
        _mm_storeu_ps(x + i, _mm_xor_ps(v, _mm_castsi128_ps(neg)));
    }
#else
    for (uint32_t i = 0; i < n; i++)
        x[i] = ((signs[i >> 3] >> (i & 7)) & 1) ? -scale * x[i] : scale * x[i];
#endif
}

static void rotate_inplace(const quant_rotation *rot, float *x)
{
    uint32_t n = rot->dim_pad;
    if (rot->kind == QUANT_ROT_FHT) {
        float s = 1.0f / sqrtf((float)n);
        for (uint32_t k = 0; k < rot->n_rounds; k++) {
            flip(x, rot->signs + (size_t)k * n / 8, n, s);
            fht(x, n);
        }
        return;
    }
    uint32_t p = 1;
    while (p * 2 <= n) p *= 2;
    float s = 1.0f / sqrtf((float)p), r2 = 0.70710678118654752f;
    uint32_t h = n / 2;
    for (uint32_t k = 0; k < rot->n_rounds; k++) {
        flip(x, rot->signs + (size_t)k * n / 8, n, 1.0f);
        float *w = (k & 1) ? x + (n - p) : x;
        for (uint32_t i = 0; i < p; i++) w[i] *= s;
        fht(w, p);
        for (uint32_t i = 0; i < h; i++) {
            float a = x[i], b = x[i + h];
            x[i] = (a + b) * r2;
            x[i + h] = (a - b) * r2;
        }
    }
}

/* P^T = P^-1: the rounds in reverse order, each undone step by step. Every step is its
 * own inverse (a sign flip; the normalised Walsh-Hadamard transform, H H = n I; the
 * normalised butterfly), so undoing a round applies its steps backwards. */
static void unrotate_inplace(const quant_rotation *rot, float *x)
{
    uint32_t n = rot->dim_pad;
    if (rot->kind == QUANT_ROT_FHT) {
        float s = 1.0f / sqrtf((float)n);
        for (uint32_t k = rot->n_rounds; k-- > 0;) {
            fht(x, n);
            flip(x, rot->signs + (size_t)k * n / 8, n, s);
        }
        return;
    }
    uint32_t p = 1;
    while (p * 2 <= n) p *= 2;
    float s = 1.0f / sqrtf((float)p), r2 = 0.70710678118654752f;
    uint32_t h = n / 2;
    for (uint32_t k = rot->n_rounds; k-- > 0;) {
        for (uint32_t i = 0; i < h; i++) {
            float a = x[i], b = x[i + h];
            x[i] = (a + b) * r2;
            x[i + h] = (a - b) * r2;
        }
        float *w = (k & 1) ? x + (n - p) : x;
        fht(w, p);
        for (uint32_t i = 0; i < p; i++) w[i] *= s;
        flip(x, rot->signs + (size_t)k * n / 8, n, 1.0f);
    }
}

void quant_unrotate(const quant_rotation *rot, const float *y, float *out)
{
    float buf[QUANT_DIM_MAX];
    memcpy(buf, y, (size_t)rot->dim_pad * sizeof *buf);
    unrotate_inplace(rot, buf);
    memcpy(out, buf, (size_t)rot->dim * sizeof *out);
}

void quant_rotate(const quant_rotation *rot, const float *x, float *out)
{
    memcpy(out, x, (size_t)rot->dim * sizeof *out);
    memset(out + rot->dim, 0, (size_t)(rot->dim_pad - rot->dim) * sizeof *out);
    rotate_inplace(rot, out);
}

void quant_rotate_n(const quant_rotation *rot, size_t n, const float *x, size_t ldx,
                    float *out, size_t ldo)
{
    for (size_t i = 0; i < n; i++) quant_rotate(rot, x + i * ldx, out + i * ldo);
}

/* ---- serialisation: fixed-width little-endian fields ---- */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

size_t quant_rotation_serialized_size(const quant_rotation *rot)
{
    return ROT_HEADER + (size_t)rot->n_rounds * rot->dim_pad / 8;
}

void quant_rotation_serialize(const quant_rotation *rot, uint8_t *buf)
{
    memcpy(buf, ROT_MAGIC, 4);
    put32(buf + 4, ROT_VERSION);
    put32(buf + 8, rot->dim);
    put32(buf + 12, rot->dim_pad);
    put32(buf + 16, rot->kind);
    put32(buf + 20, rot->n_rounds);
    put64(buf + 24, rot->seed);
    memcpy(buf + ROT_HEADER, rot->signs, (size_t)rot->n_rounds * rot->dim_pad / 8);
}

chimera_status quant_rotation_deserialize(quant_rotation *rot, const uint8_t *buf, size_t len,
                                          chimera_error *err)
{
    memset(rot, 0, sizeof *rot);
    if (len < ROT_HEADER || memcmp(buf, ROT_MAGIC, 4) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "rotation: bad magic or short header (%zu bytes)",
                       len);
    uint32_t version = get32(buf + 4);
    if (version != ROT_VERSION)
        return cm_fail(err, CHIMERA_ERR_VERSION, "rotation: version %u, expected %u", version,
                       ROT_VERSION);
    uint32_t dim = get32(buf + 8), dim_pad = get32(buf + 12), kind = get32(buf + 16);
    uint32_t rounds = get32(buf + 20);
    if (dim == 0 || dim_pad != quant_dim_pad(dim) || dim_pad > QUANT_DIM_MAX)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "rotation: dim %u / dim_pad %u inconsistent",
                       dim, dim_pad);
    if (kind != (is_pow2(dim_pad) ? (uint32_t)QUANT_ROT_FHT : (uint32_t)QUANT_ROT_FHT_KAC))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "rotation: kind %u does not fit dim_pad %u",
                       kind, dim_pad);
    if (rounds != QUANT_ROT_ROUNDS)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "rotation: %u rounds, expected %u", rounds,
                       QUANT_ROT_ROUNDS);
    size_t want = ROT_HEADER + (size_t)rounds * dim_pad / 8;
    if (len != want)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "rotation: %zu bytes, expected %zu", len, want);
    rot->dim = dim;
    rot->dim_pad = dim_pad;
    rot->kind = kind;
    rot->n_rounds = rounds;
    rot->seed = get64(buf + 24);
    memcpy(rot->signs, buf + ROT_HEADER, want - ROT_HEADER);
    return CHIMERA_OK;
}
