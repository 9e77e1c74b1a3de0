/* Inner-product kernels for graph search: one scalar reference and AVX2 / AVX-512
 * variants, picked once through core/cpu.h (docs/architecture.md, "Conventions").
 * Used by src/graph and by the CPU backend's brute probe, which scores its candidates
 * as the walk does. */
#ifndef CHIMERA_GRAPH_DOT_H
#define CHIMERA_GRAPH_DOT_H

#include <stdint.h>

typedef float (*graph_dot_fn)(const float *a, const float *b, uint32_t d);

float graph_dot_scalar(const float *a, const float *b, uint32_t d);
float graph_dot_avx2(const float *a, const float *b, uint32_t d);
float graph_dot_avx512(const float *a, const float *b, uint32_t d);

/* The kernel for the SIMD level in use. */
graph_dot_fn graph_dot_get(void);

#endif
