/* The library's window on BLAS (OpenBLAS from Debian).
 *
 * Chimera parallelises over blocks with its own pool, so every sgemm runs in the
 * calling thread: OpenBLAS's own threads are set to 1 on first use (mixing both would
 * oversubscribe the cores and make timings erratic). That setting is process-wide, so
 * CHIMERA_BLAS_THREADS=keep in the environment (read at the first sgemm) leaves it to
 * the application instead; include/chimera.h documents both for users.
 *
 * The opt-out is an environment variable rather than an API call because the choice is
 * the deployment's (like OPENBLAS_NUM_THREADS and CHIMERA_SIMD), it must hold from the
 * first sgemm of the process on, and a setter would be global mutable state in an API
 * that otherwise has none.
 *
 * Debian 12's OpenBLAS 0.3.21 does not know recent Intel server CPUs and falls back to
 * its Prescott (SSE3) kernels, 3-6x slower than its SkylakeX/Haswell ones. The core type
 * must be chosen before the library loads (OPENBLAS_CORETYPE), so the library only
 * detects the case: cm_blas_suggested_coretype() names a better core type when the one
 * in use is a generic fallback on a CPU with AVX2/AVX-512 and the user set none. The
 * CLI acts on it by re-executing itself with the variable set; a user's own setting is
 * always respected. */
#ifndef CHIMERA_CORE_BLAS_H
#define CHIMERA_CORE_BLAS_H

/* C[M x N] = alpha * A[M x K] * B[N x K]^T + beta * C (all row-major, float32). */
void cm_sgemm_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc);

/* 1 when the library leaves OpenBLAS's thread count alone (CHIMERA_BLAS_THREADS=keep):
 * what the first sgemm decided, or before it, what it would decide now. */
int cm_blas_threads_kept(void);

/* The kernel family OpenBLAS picked ("Zen", "SkylakeX", "Prescott", ...). */
const char *cm_blas_corename(void);

/* NULL when the BLAS kernels fit the CPU (or the user chose them); otherwise the
 * OPENBLAS_CORETYPE value that would ("SkylakeX" or "Haswell"). */
const char *cm_blas_suggested_coretype(void);

#endif
