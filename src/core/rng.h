/* Deterministic pseudo-random numbers: SplitMix64 for seeding, xoshiro256** for
 * streams (Blackman & Vigna). Every randomised step of the library takes an explicit
 * seed, so builds and generated corpora are reproducible. */
#ifndef CHIMERA_CORE_RNG_H
#define CHIMERA_CORE_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct cm_rng {
    uint64_t s[4];
} cm_rng;

static inline uint64_t cm_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Seeds a stream; (seed, stream) pairs give independent sequences, so a thread or a
 * document can have its own stream and results do not depend on scheduling. */
static inline void cm_rng_seed(cm_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 4; i++) r->s[i] = cm_splitmix64(&x);
}

static inline uint64_t cm_rng_next(cm_rng *r)
{
    uint64_t *s = r->s;
    uint64_t t = s[1] << 17, res = s[1] * 5;
    res = ((res << 7) | (res >> 57)) * 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return res;
}

/* Uniform in [0, 1). */
static inline double cm_rng_uniform(cm_rng *r) { return (cm_rng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, negligible bias for the
 * sizes used here). */
static inline uint64_t cm_rng_below(cm_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)cm_rng_next(r) * n) >> 64);
}

/* Selection sampling (Knuth's algorithm S, TAOCP vol. 2, 3.4.2): `want` of the indices
 * 0 .. n-1, every subset equally likely, produced in increasing order in one pass with
 * no n-sized state. Index i is taken when (n - i) u < want - taken for a fresh uniform
 * u, so exactly one draw is spent per index looked at until `want` are taken: every
 * sample in the library (training rows, k-means seeds and coarse subsample, graph
 * pivots and entry points) goes through this one loop and spends its stream alike.
 *   cm_select s; cm_select_begin(&s, n, want);
 *   for (int64_t i; (i = cm_select_next(&s, rng)) >= 0;) ... */
typedef struct cm_select {
    int64_t n, want, i, taken;
} cm_select;

static inline void cm_select_begin(cm_select *s, int64_t n, int64_t want)
{
    s->n = n;
    s->want = want;
    s->i = 0;
    s->taken = 0;
}

/* The next index taken, or -1 once `want` are taken (or all n were looked at). */
static inline int64_t cm_select_next(cm_select *s, cm_rng *r)
{
    for (; s->i < s->n && s->taken < s->want; s->i++)
        if ((double)(s->n - s->i) * cm_rng_uniform(r) < (double)(s->want - s->taken)) {
            s->taken++;
            return s->i++;
        }
    return -1;
}

/* Standard normal (Box-Muller; one value per call for simplicity). */
static inline double cm_rng_gauss(cm_rng *r)
{
    double u1 = cm_rng_uniform(r), u2 = cm_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
