// Selection on the device: exact top-k by 64-bit keys (common.cuh: cu_sel_key, larger
// score first, ties to the smaller id, 0 = not a candidate), with no full sort of the
// candidates.
//
// Method: MSD radix select, 8 bits a pass. Pass p histograms digit p of the keys that
// match the prefix fixed so far, then the bin holding the k-th largest key is fixed into
// the prefix. It stops as soon as that bin is needed whole (then exactly k keys are
// >= the prefix with its lower bits zero), at the latest after 8 passes, where the keys
// being unique makes the bin a single key. Keys >= the threshold are then gathered
// (exactly min(k, valid) of them, in any order) and only those are sorted, by a bitonic
// sort of next_pow2(k) keys. Two forms: one block over a row (probe: one block per
// query token over its K centroid scores), and grid-wide kernels over a device-resident
// count (refine: all touched documents), whose per-pass state lives in device memory so
// the host never waits in the middle.
#ifndef CHIMERA_BACKEND_CUDA_TOPK_CUH
#define CHIMERA_BACKEND_CUDA_TOPK_CUH

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/common.cuh"

#define CU_RADIX_BINS 256

// Per-selection state of the grid-wide form (device memory, zeroed before pass 0).
struct cu_sel_state {
    unsigned long long prefix, mask, threshold;
    uint32_t k_rem, done, n_valid, pass;
};

// One pick step from a finished histogram of pass `pass` (run by one thread). Returns
// through *st; see the header comment for the invariant.
__device__ static inline void cu_sel_pick(cu_sel_state *st, const uint32_t *hist, uint32_t k)
{
    if (st->done) return;
    uint32_t pass = st->pass, shift = 56u - 8u * pass;
    if (pass == 0) {
        uint32_t nv = 0;
        for (int b = 0; b < CU_RADIX_BINS; b++) nv += hist[b];
        st->n_valid = nv;
        st->k_rem = k;
        if (nv <= k) { // every valid key is selected
            st->threshold = 1ull;
            st->done = 1;
            return;
        }
    }
    uint32_t cum = 0;
    for (int b = CU_RADIX_BINS - 1; b >= 0; b--) {
        uint32_t c = hist[b];
        if (cum + c >= st->k_rem) {
            st->prefix |= (unsigned long long)b << shift;
            st->mask |= 0xffull << shift;
            st->k_rem -= cum;
            if (c == st->k_rem || pass == 7) {
                st->threshold = st->prefix;
                st->done = 1;
            }
            break;
        }
        cum += c;
    }
    st->pass = pass + 1;
}

// Bitonic sort of a[0..P) (P a power of two) into descending order by all threads of
// the block. a may be shared or global memory (__syncthreads orders both in a block).
__device__ static inline void cu_bitonic_desc(unsigned long long *a, uint32_t P)
{
    for (uint32_t size = 2; size <= P; size <<= 1)
        for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (uint32_t i = threadIdx.x; i < P / 2; i += blockDim.x) {
                uint32_t lo = 2 * stride * (i / stride) + (i % stride), hi = lo + stride;
                bool desc = (lo & size) == 0;
                unsigned long long x = a[lo], y = a[hi];
                if ((x < y) == desc) {
                    a[lo] = y;
                    a[hi] = x;
                }
            }
            __syncthreads();
        }
}

// Block-wide radix select over n keys key_of(i), i < n. hist: CU_RADIX_BINS shared
// words; st: two shared cu_sel_state, the state of this pass and the next's. All threads
// call it; returns the threshold (every thread). Keys of 0 are ignored.
//
// Thread 0 picks from a copy of this pass's state into the other one, so no shared state
// is ever written while another thread may read it. With one state read and written in
// place, compute-sanitizer's racecheck reported loads of it (the pick's `st->done`) in
// other threads while thread 0 wrote it: the compiler may load shared memory for every
// thread of a branch that only thread 0 takes.
template <class KeyOf>
__device__ static inline unsigned long long cu_block_select(KeyOf key_of, uint32_t n, uint32_t k,
                                                            uint32_t *hist, cu_sel_state st[2])
{
    if (threadIdx.x == 0) st[0] = cu_sel_state{0ull, 0ull, 0ull, 0u, 0u, 0u, 0u};
    __syncthreads();
    for (int pass = 0; pass < 8; pass++) {
        const cu_sel_state *cur = &st[pass & 1];
        cu_sel_state *next = &st[(pass + 1) & 1];
        for (uint32_t b = threadIdx.x; b < CU_RADIX_BINS; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        unsigned long long prefix = cur->prefix, mask = cur->mask;
        uint32_t shift = 56u - 8u * (uint32_t)pass;
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
            unsigned long long key = key_of(i);
            if (key != 0ull && (key & mask) == prefix)
                atomicAdd(&hist[(uint32_t)(key >> shift) & 0xffu], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            cu_sel_state s = *cur;
            cu_sel_pick(&s, hist, k);
            *next = s;
        }
        __syncthreads();
        // uniform: every thread reads the same shared word; pass 7 always ends it
        if (next->done || pass == 7) return next->threshold;
    }
    return 0ull; // not reached
}

// ---- grid-wide form (topk.cu) -----------------------------------------------------------

// Histogram of one pass over keys[0 .. *n). Skips work once st->done.
__global__ void cu_sel_hist_kernel(const unsigned long long *keys, const uint32_t *n,
                                   const cu_sel_state *st, uint32_t *ghist);
// One thread picks; the block then clears ghist for the next pass.
__global__ void cu_sel_pick_kernel(cu_sel_state *st, uint32_t *ghist, uint32_t k);
// out[0 .. *count) = keys >= threshold (any order; *count <= cap).
__global__ void cu_sel_gather_kernel(const unsigned long long *keys, const uint32_t *n,
                                     const cu_sel_state *st, unsigned long long *out,
                                     uint32_t *count, uint32_t cap);
// One block: sorts out[0..*count) descending (padded to P with zeros, in shared memory
// when use_smem, else in place in `out`, which then has room for P keys), and writes
// ids/scores of the first *count keys.
__global__ void cu_sel_sort_kernel(unsigned long long *out, const uint32_t *count, uint32_t P,
                                   int use_smem, uint32_t *ids, float *scores);

#endif
