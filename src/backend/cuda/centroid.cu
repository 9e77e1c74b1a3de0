// Centroid scores and probing (paper §3.2 step 1; docs/algorithms.md §2.3-2.5).
//
// Scores: cuBLAS sgemm, S = C Q^T. Two layouts, because the two readers want different
// contiguity: document scoring gathers the m scores of one centroid per document token
// (row-major [K x m], computed in query_begin), the brute-force probe scans all K scores
// of one query token (row-major [m x K], computed only when the brute probe runs). The
// second product costs 2*K*m*dim flops (0.27 GFLOP at K = 2^15, m = 32, d = 128), far
// less than a strided scan of the first layout (a 32-byte sector per useful 4 bytes).
// Default math mode: plain fp32, no TF32.
//
// Brute-force probe: one block per query token (512 threads) selects its n_probe best
// centroids from its row of S with the block radix select (topk.cuh: at most 8 passes
// over the row, early exit when the threshold bin is taken whole), gathers the winners
// and sorts only those (next_pow2(n_probe) keys in shared memory, <= 32 KiB at
// CU_MAX_PROBE). Ties go to the smaller centroid id, as in the CPU backend.
//
// Graph probe (CAGRA single-CTA search, docs/algorithms.md §2.4, §2.5): one block of 256 threads
// per query token. Shared memory holds the query token, the candidate buffer of
// itopk + width*degree entries (sorted by a bitonic sort of its next power of two each
// iteration), a visited hash (open addressing, linear probing, atomicCAS insert, sized to
// 4x the buffer, cleared and refilled from the itopk list when half full), and the
// children of the iteration. Entries are 64-bit keys: score key (high word), the
// "expanded" flag (bit 31) and 0x7fffffff - id, so one integer compare sorts by score
// (ids < 2^31, checked at upload). Each iteration picks the first `width` unexpanded
// entries of the itopk list as parents, drops what fell below the list, inserts their
// children into the hash and scores the new ones with teams of 8 lanes (coalesced row
// reads, shuffle reduction). Seeds: the graph's stored entry points (as the CPU searcher),
// so the search is deterministic. It stops when every entry of the list is expanded or
// after 4*itopk/width + 64 iterations.
// itopk = max(64, 3*n_probe) rounded up to 32, as graph_search's default; width 1 up to
// itopk 128, 2 at 256, 4 at 512. n_probe > 256 (itopk > 512) is beyond one CTA's buffer:
// such probes, and graphs with degree 0 or no entry points, use the brute force.
//
// AUTO rule: the graph from CU_GRAPH_MIN_K = 2^20 centroids. Below that the brute force
// reads 4*K*m bytes of S per radix pass (8 MiB at K = 2^16, m = 32: microseconds at HBM
// speed, mostly L2 hits) and a second small sgemm, while the graph search is a chain of
// ~itopk/width dependent iterations per token whose latency does not shrink with K.
// XXX: the crossover is a lead from this model, not a measurement.
#include <cmath>

#include "backend/cuda/cuda_internal.cuh"

#define GRAPH_THREADS 256
#define GRAPH_TEAM 8
#define GRAPH_FLAG 0x80000000ull
#define GRAPH_INVALID 0xffffffffu
#define GRAPH_HASH_EMPTY 0xffffffffu
#define GRAPH_MAX_WIDTH 4

// ---- brute force ---------------------------------------------------------------------

#define BRUTE_THREADS 512

__global__ void __launch_bounds__(BRUTE_THREADS)
    probe_brute_kernel(const float *S_mk, uint32_t K, uint32_t np, uint32_t P, uint32_t *cid,
                       float *qc)
{
    extern __shared__ unsigned long long pb_buf[];
    __shared__ uint32_t hist[CU_RADIX_BINS];
    __shared__ cu_sel_state st[2];
    __shared__ uint32_t cnt;
    const float *row = S_mk + (size_t)blockIdx.x * K;
    auto key_of = [row](uint32_t i) { return cu_sel_key(row[i], i); };
    unsigned long long T = cu_block_select(key_of, K, np, hist, st);
    if (threadIdx.x == 0) cnt = 0;
    for (uint32_t i = threadIdx.x; i < P; i += blockDim.x) pb_buf[i] = 0ull;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < K; i += blockDim.x) {
        unsigned long long key = key_of(i);
        if (key >= T) {
            uint32_t slot = atomicAdd(&cnt, 1u);
            if (slot < P) pb_buf[slot] = key;
        }
    }
    __syncthreads();
    cu_bitonic_desc(pb_buf, P);
    for (uint32_t i = threadIdx.x; i < np; i += blockDim.x) {
        unsigned long long key = pb_buf[i];
        cid[(size_t)blockIdx.x * np + i] = key ? cu_sel_id(key) : UINT32_MAX;
        qc[(size_t)blockIdx.x * np + i] = key ? cu_sel_score(key) : -INFINITY;
    }
}

size_t cu_probe_brute_smem(uint32_t n_probe)
{
    return (size_t)cu_next_pow2(n_probe) * sizeof(unsigned long long);
}

static chimera_status centroid_gemm(cu_ctx *c, cu_worker *w, int token_major, chimera_error *err)
{
    const float one = 1.0f, zero = 0.0f;
    int K = (int)c->r.n_clusters, m = (int)w->m, d = (int)c->r.dim;
    if (token_major)
        CUBLAS_CHECK(cublasSgemm(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, K, m, d, &one,
                                 c->r.centroids, d, w->d_q, d, &zero, w->d_S_mk, K));
    else
        CUBLAS_CHECK(cublasSgemm(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, K, d, &one, w->d_q, d,
                                 c->r.centroids, d, &zero, w->d_S_km, m));
    return CHIMERA_OK;
}

chimera_status cu_centroid_km(cu_ctx *c, cu_worker *w, chimera_error *err)
{
    return centroid_gemm(c, w, 0, err);
}

chimera_status cu_probe_brute(cu_ctx *c, cu_worker *w, uint32_t n_probe, chimera_error *err)
{
    CM_TRY(centroid_gemm(c, w, 1, err));
    uint32_t P = cu_next_pow2(n_probe);
    probe_brute_kernel<<<w->m, BRUTE_THREADS, cu_probe_brute_smem(n_probe), w->stream>>>(
        w->d_S_mk, c->r.n_clusters, n_probe, P, w->d_probe_cid, w->d_probe_qc);
    LAUNCH_CHECK();
    return CHIMERA_OK;
}

// ---- graph search --------------------------------------------------------------------

struct graph_params {
    uint32_t L, W, n_child, P, hbits, max_iter;
};

static graph_params graph_params_for(const cu_ctx *c, uint32_t n_probe)
{
    graph_params g;
    uint32_t L = 3 * n_probe > 64 ? 3 * n_probe : 64; // graph_search's default itopk
    g.L = (L + 31) / 32 * 32;
    g.W = g.L <= 128 ? 1 : g.L <= 256 ? 2 : 4;
    g.n_child = g.W * c->r.degree;
    if (g.n_child < 32) g.n_child = 32;
    g.P = cu_next_pow2(g.L + g.n_child);
    uint32_t hs = cu_next_pow2(4 * (g.L + g.n_child));
    if (hs < 1024) hs = 1024;
    g.hbits = 0;
    while ((1u << g.hbits) < hs) g.hbits++;
    g.max_iter = 4 * g.L / g.W + 64;
    return g;
}

size_t cu_graph_smem(const cu_ctx *c, uint32_t n_probe)
{
    graph_params g = graph_params_for(c, n_probe);
    return (size_t)g.P * 8 + (size_t)c->r.dim * 4 + ((size_t)1 << g.hbits) * 4 +
           (size_t)g.n_child * 4;
}

int cu_graph_usable(const cu_ctx *c, uint32_t n_probe)
{
    uint32_t L = 3 * n_probe > 64 ? 3 * n_probe : 64;
    return c->r.degree > 0 && c->r.n_entry > 0 && (L + 31) / 32 * 32 <= c->itopk_cap &&
           cu_graph_smem(c, n_probe) <= c->smem_optin;
}

struct graph_args {
    const float *cent, *q;
    const uint32_t *adj, *entry;
    uint32_t K, deg, n_entry, dim, np;
    graph_params g;
    uint32_t *cid;
    float *qc;
};

__device__ static inline unsigned long long graph_key(float s, uint32_t id)
{
    return ((unsigned long long)cu_fukey(s) << 32) | (unsigned long long)(0x7fffffffu - id);
}
__device__ static inline uint32_t graph_id(unsigned long long key)
{
    return 0x7fffffffu - (uint32_t)(key & 0x7fffffffull);
}

// 1 when id was not in the table (now inserted).
__device__ static inline int graph_hash_insert(uint32_t *h, uint32_t hbits, uint32_t id,
                                               uint32_t *count)
{
    uint32_t mask = (1u << hbits) - 1, s = (id * 0x9e3779b1u) >> (32 - hbits);
    for (uint32_t probe = 0; probe <= mask; probe++) {
        uint32_t prev = atomicCAS(h + s, GRAPH_HASH_EMPTY, id);
        if (prev == GRAPH_HASH_EMPTY) {
            atomicAdd(count, 1u);
            return 1;
        }
        if (prev == id) return 0;
        s = (s + 1) & mask;
    }
    return 0; // full: cannot happen, the table is kept at most half full
}

// out[i] = key of ids[i] (0 for GRAPH_INVALID), i < n; teams of GRAPH_TEAM lanes per id.
// The trip count depends only on n, so every lane reaches every shuffle.
__device__ static inline void graph_score(const uint32_t *ids, uint32_t n, const float *q,
                                          const float *cent, uint32_t dim,
                                          unsigned long long *out)
{
    uint32_t lt = threadIdx.x % GRAPH_TEAM, team = threadIdx.x / GRAPH_TEAM,
             n_teams = blockDim.x / GRAPH_TEAM;
    for (uint32_t base = 0; base < n; base += n_teams) {
        uint32_t i = base + team, id = i < n ? ids[i] : GRAPH_INVALID;
        float acc = 0.0f;
        if (id != GRAPH_INVALID) {
            const float *row = cent + (size_t)id * dim;
            for (uint32_t d = lt; d < dim; d += GRAPH_TEAM) acc += q[d] * __ldg(row + d);
        }
        for (int o = GRAPH_TEAM / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (lt == 0 && i < n) out[i] = id != GRAPH_INVALID ? graph_key(acc, id) : 0ull;
    }
}

__global__ void __launch_bounds__(GRAPH_THREADS) graph_search_kernel(graph_args a)
{
    extern __shared__ unsigned long long gs_smem[];
    const graph_params g = a.g;
    unsigned long long *buf = gs_smem;                                // [P]
    float *q = reinterpret_cast<float *>(buf + g.P);                  // [dim]
    uint32_t *hash = reinterpret_cast<uint32_t *>(q + a.dim);         // [2^hbits]
    uint32_t *cand = hash + (1u << g.hbits);                          // [n_child]
    __shared__ uint32_t par[GRAPH_MAX_WIDTH], n_par, hash_count;
    uint32_t hs = 1u << g.hbits;

    const float *qj = a.q + (size_t)blockIdx.x * a.dim;
    for (uint32_t i = threadIdx.x; i < a.dim; i += blockDim.x) q[i] = qj[i];
    for (uint32_t i = threadIdx.x; i < g.P; i += blockDim.x) buf[i] = 0ull;
    for (uint32_t i = threadIdx.x; i < hs; i += blockDim.x) hash[i] = GRAPH_HASH_EMPTY;
    if (threadIdx.x == 0) hash_count = 0;
    __syncthreads();

    // Seeds: the entry points, as many as the buffer holds, in chunks of n_child.
    uint32_t n0 = a.n_entry < g.L + g.n_child ? a.n_entry : g.L + g.n_child;
    for (uint32_t base = 0; base < n0; base += g.n_child) {
        uint32_t nc = n0 - base < g.n_child ? n0 - base : g.n_child;
        for (uint32_t t = threadIdx.x; t < nc; t += blockDim.x) {
            uint32_t id = a.entry[base + t];
            cand[t] = id < a.K && graph_hash_insert(hash, g.hbits, id, &hash_count) ? id
                                                                                   : GRAPH_INVALID;
        }
        __syncthreads();
        graph_score(cand, nc, q, a.cent, a.dim, buf + base);
        __syncthreads();
    }

    for (uint32_t iter = 0; iter < g.max_iter; iter++) {
        cu_bitonic_desc(buf, g.P); // ends with a barrier
        if (threadIdx.x == 0) {
            uint32_t np_ = 0;
            for (uint32_t i = 0; i < g.L && np_ < g.W; i++) {
                unsigned long long key = buf[i];
                if (key != 0ull && !(key & GRAPH_FLAG)) {
                    buf[i] = key | GRAPH_FLAG;
                    par[np_++] = graph_id(key);
                }
            }
            n_par = np_;
        }
        for (uint32_t i = g.L + threadIdx.x; i < g.P; i += blockDim.x) buf[i] = 0ull;
        __syncthreads();
        if (n_par == 0) break; // uniform
        if (hash_count + n_par * a.deg > hs / 2) { // refill from the itopk list
            __syncthreads();
            for (uint32_t i = threadIdx.x; i < hs; i += blockDim.x) hash[i] = GRAPH_HASH_EMPTY;
            if (threadIdx.x == 0) hash_count = 0;
            __syncthreads();
            for (uint32_t i = threadIdx.x; i < g.L; i += blockDim.x)
                if (buf[i] != 0ull) graph_hash_insert(hash, g.hbits, graph_id(buf[i]), &hash_count);
            __syncthreads();
        }
        for (uint32_t t = threadIdx.x; t < g.n_child; t += blockDim.x) {
            uint32_t p = a.deg ? t / a.deg : 0, child = GRAPH_INVALID;
            if (a.deg && p < n_par) child = __ldg(a.adj + (size_t)par[p] * a.deg + t % a.deg);
            cand[t] = child < a.K && graph_hash_insert(hash, g.hbits, child, &hash_count)
                          ? child
                          : GRAPH_INVALID;
        }
        __syncthreads();
        graph_score(cand, g.n_child, q, a.cent, a.dim, buf + g.L);
        __syncthreads();
    }
    // Final order without the flags (so ties go to the smaller id), top n_probe out.
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < g.P; i += blockDim.x) buf[i] &= ~GRAPH_FLAG;
    __syncthreads();
    cu_bitonic_desc(buf, g.P);
    for (uint32_t i = threadIdx.x; i < a.np; i += blockDim.x) {
        unsigned long long key = buf[i];
        a.cid[(size_t)blockIdx.x * a.np + i] = key ? graph_id(key) : UINT32_MAX;
        a.qc[(size_t)blockIdx.x * a.np + i] = key ? cu_fukey_inv((uint32_t)(key >> 32)) : -INFINITY;
    }
}

chimera_status cu_centroid_prepare(cu_ctx *c, chimera_error *err)
{
    // The largest graph configuration this index can use: raise the dynamic shared
    // memory limit once to what it needs (capped by the device).
    size_t need = 0;
    for (uint32_t np = 1; np <= CU_GRAPH_ITOPK_MAX / 2; np *= 2) {
        size_t s = cu_graph_smem(c, np);
        if (s <= c->smem_optin && s > need) need = s;
    }
    if (need > 48u * 1024u)
        CUDA_CHECK(cudaFuncSetAttribute(graph_search_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
    return CHIMERA_OK;
}

chimera_status cu_probe_graph(cu_ctx *c, cu_worker *w, uint32_t n_probe, chimera_error *err)
{
    graph_args a;
    a.cent = c->r.centroids;
    a.q = w->d_q;
    a.adj = c->r.graph_adj;
    a.entry = c->r.graph_entry;
    a.K = c->r.n_clusters;
    a.deg = c->r.degree;
    a.n_entry = c->r.n_entry;
    a.dim = c->r.dim;
    a.np = n_probe;
    a.g = graph_params_for(c, n_probe);
    a.cid = w->d_probe_cid;
    a.qc = w->d_probe_qc;
    graph_search_kernel<<<w->m, GRAPH_THREADS, cu_graph_smem(c, n_probe), w->stream>>>(a);
    LAUNCH_CHECK();
    return CHIMERA_OK;
}
