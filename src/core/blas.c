/* OpenBLAS wrapper (see blas.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "core/blas.h"
#include "core/cpu.h"

/* OpenBLAS extensions (declared in its cblas.h too; repeated so the intent is plain). */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* What the first sgemm decided: 0 not yet, 1 set OpenBLAS to one thread, 2 kept. */
static _Atomic int decided;

static int env_keep(void)
{
    const char *env = getenv("CHIMERA_BLAS_THREADS");
    return env && strcmp(env, "keep") == 0;
}

static void init(void)
{
    int keep = env_keep();
    if (!keep) openblas_set_num_threads(1);
    decided = keep ? 2 : 1;
}

int cm_blas_threads_kept(void)
{
    int d = decided;
    return d ? d == 2 : env_keep();
}

void cm_sgemm_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    pthread_once(&once, init);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta,
                C, ldc);
}

const char *cm_blas_corename(void)
{
    const char *name = openblas_get_corename();
    return name ? name : "unknown";
}

const char *cm_blas_suggested_coretype(void)
{
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    static const char *generic[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                    "Atom", "Katmai", "Northwood", "Banias", "unknown"};
    const char *name = cm_blas_corename();
    int is_generic = 0;
    for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
        if (strcmp(name, generic[i]) == 0) is_generic = 1;
    if (!is_generic) return NULL;
    if (cm_cpu_supports(CM_SIMD_AVX512)) return "SkylakeX";
    if (cm_cpu_supports(CM_SIMD_AVX2)) return "Haswell";
    return NULL;
}
