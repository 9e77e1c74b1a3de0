// Shared pieces of the CUDA backend: status-returning error checks, the order-
// preserving float keys behind the atomic max/min reductions, and small device helpers.
//
// Every CUDA runtime and cuBLAS call goes through CUDA_CHECK / CUBLAS_CHECK, and every
// kernel launch is followed by LAUNCH_CHECK (cudaGetLastError: a bad configuration is
// reported at the launch, not at the next synchronisation). A failure never aborts: it
// fills the caller's chimera_error with the statement, file and line and returns
// CHIMERA_ERR_DEVICE from the enclosing function, which must therefore return
// chimera_status and have a `chimera_error *err` in scope.
#ifndef CHIMERA_BACKEND_CUDA_COMMON_CUH
#define CHIMERA_BACKEND_CUDA_COMMON_CUH

#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "chimera.h"

extern "C" {
#include "core/error.h"
}

#define CUDA_CHECK(stmt)                                                                       \
    do {                                                                                       \
        cudaError_t cuda_check_e_ = (stmt);                                                    \
        if (cuda_check_e_ != cudaSuccess) {                                                    \
            cudaGetLastError(); /* clear a non-sticky error */                                 \
            return cm_fail(err, CHIMERA_ERR_DEVICE, "cuda: %s failed at %s:%d: %s (%s)",       \
                           #stmt, __FILE__, __LINE__, cudaGetErrorString(cuda_check_e_),       \
                           cudaGetErrorName(cuda_check_e_));                                   \
        }                                                                                      \
    } while (0)

#define CUBLAS_CHECK(stmt)                                                                     \
    do {                                                                                       \
        cublasStatus_t cublas_check_s_ = (stmt);                                               \
        if (cublas_check_s_ != CUBLAS_STATUS_SUCCESS)                                          \
            return cm_fail(err, CHIMERA_ERR_DEVICE, "cublas: %s failed at %s:%d: %s", #stmt,   \
                           __FILE__, __LINE__, cublasGetStatusString(cublas_check_s_));        \
    } while (0)

// After every <<<...>>>: launch-configuration errors (too much shared memory, a grid
// dimension out of range) surface here.
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// ---- order-preserving keys (docs/algorithms.md §3.2) ----------------------------------
//
// Signed 32-bit key: key(a) < key(b) iff a < b for all non-NaN floats, so a float max or
// min becomes one native integer atomicMax/atomicMin. INT32_MIN is below every non-NaN
// key (it decodes to a NaN bit pattern): it marks "no estimate yet"; INT32_MAX likewise
// sits above every non-NaN key (the empty min). -0.0 sorts just below +0.0.
#define CU_KEY_EMPTY_MAX INT32_MIN
#define CU_KEY_EMPTY_MIN INT32_MAX

__host__ __device__ static inline int32_t cu_fkey(float f)
{
    union {
        float f;
        int32_t i;
    } u;
    u.f = f;
    return u.i >= 0 ? u.i : u.i ^ 0x7fffffff;
}

__host__ __device__ static inline float cu_funkey(int32_t k)
{
    union {
        float f;
        int32_t i;
    } u;
    u.i = k >= 0 ? k : k ^ 0x7fffffff;
    return u.f;
}

// Unsigned 32-bit order-preserving key (the high half of the 64-bit selection keys);
// never 0 for a non-NaN float (-inf maps to 0x007fffff).
__host__ __device__ static inline uint32_t cu_fukey(float f)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.f = f;
    return (v.u & 0x80000000u) ? ~v.u : (v.u | 0x80000000u);
}

__host__ __device__ static inline float cu_fukey_inv(uint32_t k)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return v.f;
}

// 64-bit selection key: larger score first, then smaller id. Unique per id, and 0 is
// never a valid key (so 0 pads and marks "not a candidate").
__host__ __device__ static inline unsigned long long cu_sel_key(float score, uint32_t id)
{
    return ((unsigned long long)cu_fukey(score) << 32) | (unsigned long long)(~id);
}
__host__ __device__ static inline float cu_sel_score(unsigned long long key)
{
    return cu_fukey_inv((uint32_t)(key >> 32));
}
__host__ __device__ static inline uint32_t cu_sel_id(unsigned long long key)
{
    return ~(uint32_t)key;
}

static inline unsigned cu_div_up(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

static inline uint32_t cu_next_pow2(uint32_t x)
{
    uint32_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

#endif
