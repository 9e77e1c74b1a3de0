/* Scalar inner product (the reference) and the run-time kernel choice. Eight
 * independent accumulators let the compiler pipeline the adds even at baseline ISA;
 * the float sum order therefore differs from a naive loop by rounding only. */
#include "core/cpu.h"
#include "graph/dot.h"

float graph_dot_scalar(const float *a, const float *b, uint32_t d)
{
    float s[8] = {0};
    uint32_t t = 0;
    for (; t + 8 <= d; t += 8)
        for (int j = 0; j < 8; j++) s[j] += a[t + j] * b[t + j];
    for (; t < d; t++) s[0] += a[t] * b[t];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

graph_dot_fn graph_dot_get(void)
{
    switch (cm_simd_level_get()) {
    case CM_SIMD_AVX512: return graph_dot_avx512;
    case CM_SIMD_AVX2: return graph_dot_avx2;
    default: return graph_dot_scalar;
    }
}
