// Grid-wide radix select kernels (topk.cuh). The candidate count stays on the device:
// every kernel reads *n itself, with a fixed grid and grid-stride loops, so the host
// enqueues the 8 passes without waiting; passes after the one that finished return at
// once.
#include "backend/cuda/topk.cuh"

__global__ void cu_sel_hist_kernel(const unsigned long long *keys, const uint32_t *n,
                                   const cu_sel_state *st, uint32_t *ghist)
{
    __shared__ uint32_t h[CU_RADIX_BINS];
    if (st->done) return; // uniform over the grid
    uint32_t count = *n, shift = 56u - 8u * st->pass;
    unsigned long long prefix = st->prefix, mask = st->mask;
    for (uint32_t b = threadIdx.x; b < CU_RADIX_BINS; b += blockDim.x) h[b] = 0;
    __syncthreads();
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += gridDim.x * blockDim.x) {
        unsigned long long key = keys[i];
        if (key != 0ull && (key & mask) == prefix)
            atomicAdd(&h[(uint32_t)(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    for (uint32_t b = threadIdx.x; b < CU_RADIX_BINS; b += blockDim.x)
        if (h[b]) atomicAdd(&ghist[b], h[b]);
}

__global__ void cu_sel_pick_kernel(cu_sel_state *st, uint32_t *ghist, uint32_t k)
{
    if (threadIdx.x == 0) cu_sel_pick(st, ghist, k);
    __syncthreads();
    for (uint32_t b = threadIdx.x; b < CU_RADIX_BINS; b += blockDim.x) ghist[b] = 0;
}

__global__ void cu_sel_gather_kernel(const unsigned long long *keys, const uint32_t *n,
                                     const cu_sel_state *st, unsigned long long *out,
                                     uint32_t *count, uint32_t cap)
{
    uint32_t nn = *n;
    unsigned long long t = st->threshold;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < nn;
         i += gridDim.x * blockDim.x) {
        unsigned long long key = keys[i];
        if (key != 0ull && key >= t) {
            uint32_t slot = atomicAdd(count, 1u);
            if (slot < cap) out[slot] = key;
        }
    }
}

__global__ void cu_sel_sort_kernel(unsigned long long *out, const uint32_t *count, uint32_t P,
                                   int use_smem, uint32_t *ids, float *scores)
{
    extern __shared__ unsigned long long sel_smem[];
    unsigned long long *a = use_smem ? sel_smem : out;
    uint32_t c = *count < P ? *count : P;
    for (uint32_t i = threadIdx.x; i < P; i += blockDim.x) a[i] = i < c ? out[i] : 0ull;
    __syncthreads();
    cu_bitonic_desc(a, P);
    for (uint32_t i = threadIdx.x; i < c; i += blockDim.x) {
        ids[i] = cu_sel_id(a[i]);
        scores[i] = cu_sel_score(a[i]);
    }
}
