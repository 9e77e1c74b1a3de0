// Document scoring on the device: the complete 1-bit Chamfer score of a chunk of
// documents (paper §3.2 step 3, §4.1 "query tiling", §4.2 "document score aggregation").
//
// Grid: one block of CU_THREADS threads per CU_SCORE_DOCS_PER_BLOCK documents of the id
// list. The ids are global; one thread per document finds its segment (a binary search
// over the segments' doc_base, cu_doc_segment) and keeps, per document slot in shared
// memory, its first token and its segment's code, factor and centroid-id arrays, so the
// token loop below reads any mix of segments with no search of its own. The block lays
// its documents' tokens end to end (doc-major codes, so each document is one contiguous
// run) and gives one thread one token per round: thread t reads token t's code, factors
// and centroid id, so a warp's loads are coalesced (consecutive 16-byte rows at d = 128). Query tiling: the m query tokens are taken TQ at
// a time; the block stages the LUT slice of the tile (TQ * dim_pad * 16 bytes, TQ chosen
// so the slice fits CU_SCORE_LUT_BYTES: TQ = 16 at d = 128, two tiles for m = 32) in
// shared memory, then every thread loads its token's code into registers once (lut.cuh)
// and reuses it for all TQ query tokens of the tile, each estimate
// qm_est1(S[cid][j], factors, ip) with S the [K x m] centroid scores of query_begin.
//
// Aggregation: the estimates stay in registers (no token-score matrix in global memory,
// so nothing to stage back: the fused form of the paper's staged max). The per-document
// max over its tokens is a segmented warp reduction, __match_any_sync on the document
// slot then __reduce_max_sync (sm_80+) on the order-preserving keys, and the group's
// first lane does one shared-memory atomicMax into mx[doc][j]; documents span warps and
// rounds through those shared cells. Finally one thread per document sums its m maxima in
// query-token order (the reference's order). An empty document scores -inf, as in the
// CPU backend.
//
// Shared memory per block: TQ * dim_pad * 16 (LUT tile) + 4 * DOCS * m (maxima) + small.
//
// The centroid-interaction score (ci_kernel) reads no codes: one warp per document, lane
// l keeps the maximum of S[cid_t][j] over the document's tokens for j = l, l + 32, ...
// (a warp reads one row segment of S per token, coalesced), the maxima go to shared
// memory and the warp's first lane sums them in query-token order, as the CPU does.
#include <cmath>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/lut.cuh"

struct score_args {
    const uint32_t *docs;
    uint32_t n_docs_list, m, tq, dim_pad, n_words, code_bytes;
    const cu_segment *segs; // [n_segs] device descriptors
    uint32_t n_segs;
    const float *S_km; // [K x m]
    const float *lut;  // [m][dim_pad*4]
    float *scores;
};

template <int NW>
__global__ void __launch_bounds__(CU_THREADS) score1_kernel(score_args a)
{
    extern __shared__ float4 score_smem[];
    float *lut = reinterpret_cast<float *>(score_smem);       // [tq][dim_pad*4]
    int32_t *mx = reinterpret_cast<int32_t *>(lut + (size_t)a.tq * a.dim_pad * 4); // [DOCS][m]
    __shared__ int64_t t0[CU_SCORE_DOCS_PER_BLOCK]; // first token, local to its segment
    __shared__ const uint8_t *codes_of[CU_SCORE_DOCS_PER_BLOCK];
    __shared__ const quant_f1 *fact_of[CU_SCORE_DOCS_PER_BLOCK];
    __shared__ const uint32_t *cid_of[CU_SCORE_DOCS_PER_BLOCK];
    // Token offsets within the block's documents: 64-bit, since a handful of documents
    // may hold up to the 2^32 - 1 tokens of an index, and the row loop below steps past
    // the total by up to blockDim.x, which wrapped in 32 bits near 2^32.
    __shared__ uint64_t off[CU_SCORE_DOCS_PER_BLOCK + 1];
    static_assert(CU_SCORE_DOCS_PER_BLOCK <= CU_THREADS, "a thread per document of the block");
    uint32_t i0 = blockIdx.x * CU_SCORE_DOCS_PER_BLOCK;
    uint32_t nd = a.n_docs_list - i0 < CU_SCORE_DOCS_PER_BLOCK ? a.n_docs_list - i0
                                                               : CU_SCORE_DOCS_PER_BLOCK;
    // One thread per document finds it (the searches are chains of dependent loads, so
    // they run side by side), then the first thread turns the lengths into offsets.
    if (threadIdx.x < nd) {
        uint32_t i = threadIdx.x, d = a.docs[i0 + i];
        const cu_segment *sg = a.segs + cu_doc_segment(a.segs, a.n_segs, d);
        int64_t ld = (int64_t)d - sg->doc_base;
        int64_t b = sg->doc_off[ld], e = sg->doc_off[ld + 1];
        t0[i] = b;
        codes_of[i] = sg->d1_codes;
        fact_of[i] = sg->d1_fact;
        cid_of[i] = sg->tok_cid;
        off[i + 1] = (uint64_t)(e - b);
    }
    for (uint32_t i = threadIdx.x; i < CU_SCORE_DOCS_PER_BLOCK * a.m; i += blockDim.x)
        mx[i] = CU_KEY_EMPTY_MAX;
    __syncthreads();
    if (threadIdx.x == 0) {
        off[0] = 0;
        for (uint32_t i = 0; i < nd; i++) off[i + 1] += off[i];
    }
    __syncthreads();
    uint64_t total = off[nd];
    uint32_t lane = threadIdx.x & 31;

    for (uint32_t j0 = 0; j0 < a.m; j0 += a.tq) {
        uint32_t tq = a.m - j0 < a.tq ? a.m - j0 : a.tq;
        const float4 *src = reinterpret_cast<const float4 *>(a.lut + (size_t)j0 * a.dim_pad * 4);
        for (uint32_t i = threadIdx.x; i < tq * a.dim_pad; i += blockDim.x) score_smem[i] = src[i];
        __syncthreads();
        for (uint64_t r0 = 0; r0 < total; r0 += blockDim.x) { // block-uniform trip count
            uint64_t u = r0 + threadIdx.x;
            int valid = u < total;
            uint32_t slot = 0;
            if (valid)
                while (slot + 1 < nd && off[slot + 1] <= u) slot++;
            int64_t tok = valid ? t0[slot] + (int64_t)(u - off[slot]) : 0;
            const uint8_t *code = nullptr; // read only when valid
            cu_code<NW> cw;
            quant_f1 f = {0, 0, 0};
            const float *srow = a.S_km;
            if (valid) {
                code = codes_of[slot] + (size_t)tok * a.code_bytes;
                cu_code_load<NW>(cw, code);
                f = fact_of[slot][tok];
                srow = a.S_km + (size_t)__ldg(cid_of[slot] + tok) * a.m;
            }
            unsigned grp = __match_any_sync(0xffffffffu, valid ? (int)slot : -1);
            int leader = (__ffs(grp) - 1) == (int)lane;
            for (uint32_t jj = 0; jj < tq; jj++) {
                uint32_t j = j0 + jj;
                int32_t key = CU_KEY_EMPTY_MAX;
                if (valid) {
                    float ip = cu_lut_ip<NW>(lut + (size_t)jj * a.dim_pad * 4, cw, code, a.n_words);
                    key = cu_fkey(qm_est1(srow[j], &f, ip));
                }
                int32_t kmax = __reduce_max_sync(grp, key);
                if (valid && leader) atomicMax(mx + slot * a.m + j, kmax);
            }
        }
        __syncthreads(); // before the next tile overwrites the LUT slice
    }
    for (uint32_t i = threadIdx.x; i < nd; i += blockDim.x) {
        float s = 0.0f;
        for (uint32_t j = 0; j < a.m; j++) s += cu_funkey(mx[i * a.m + j]);
        a.scores[i0 + i] = off[i + 1] > off[i] ? s : -INFINITY;
    }
}

size_t cu_score1_smem(const cu_ctx *c, uint32_t *tq)
{
    size_t per = (size_t)c->r.dim_pad * 16;
    uint32_t t = (uint32_t)(CU_SCORE_LUT_BYTES / per);
    if (t < 1) t = 1;
    if (t > c->cfg.max_m) t = c->cfg.max_m;
    *tq = t;
    return per * t + (size_t)CU_SCORE_DOCS_PER_BLOCK * c->cfg.max_m * 4;
}

chimera_status cu_score1_prepare(cu_ctx *c, chimera_error *err)
{
    uint32_t tq;
    size_t smem = cu_score1_smem(c, &tq);
    if (smem > c->smem_optin)
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "cuda backend: document scoring needs %zu bytes of shared memory "
                       "(dim_pad %u, max_m %u), the device allows %zu",
                       smem, c->r.dim_pad, c->cfg.max_m, c->smem_optin);
#define SCORE_ATTR(NW)                                                                         \
    CUDA_CHECK(cudaFuncSetAttribute(score1_kernel<NW>,                                         \
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))
    CU_DISPATCH_NW(c->r.dim_pad / 32, SCORE_ATTR)
#undef SCORE_ATTR
    return CHIMERA_OK;
}

// Scores w->d_out_ids[0..n) into w->d_out_scores.
chimera_status cu_score1_run(cu_ctx *c, cu_worker *w, uint32_t n, chimera_error *err)
{
    score_args a;
    a.docs = w->d_out_ids;
    a.n_docs_list = n;
    a.m = w->m;
    a.dim_pad = c->r.dim_pad;
    a.n_words = c->r.dim_pad / 32;
    a.code_bytes = c->r.code_bytes;
    a.segs = c->r.d_segs;
    a.n_segs = c->r.n_segs;
    a.S_km = w->d_S_km;
    a.lut = w->d_lut;
    a.scores = w->d_out_scores;
    size_t smem = cu_score1_smem(c, &a.tq);
    unsigned blocks = cu_div_up(n, CU_SCORE_DOCS_PER_BLOCK);
#define SCORE_LAUNCH(NW) score1_kernel<NW><<<blocks, CU_THREADS, smem, w->stream>>>(a)
    CU_DISPATCH_NW(a.n_words, SCORE_LAUNCH)
#undef SCORE_LAUNCH
    LAUNCH_CHECK();
    return CHIMERA_OK;
}

struct ci_args {
    const uint32_t *docs;
    uint32_t n_docs_list, m;
    const cu_segment *segs;
    uint32_t n_segs;
    const float *S_km; // [K x m]
    float *scores;
};

__global__ void __launch_bounds__(CU_THREADS) ci_kernel(ci_args a)
{
    extern __shared__ float ci_smem[]; // [CU_THREADS / 32][m]
    uint32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    uint32_t i = blockIdx.x * (CU_THREADS / 32) + warp;
    if (i >= a.n_docs_list) return; // the whole warp: no block-wide barrier below
    float *mx = ci_smem + (size_t)warp * a.m;
    uint32_t d = a.docs[i];
    const cu_segment *sg = a.segs + cu_doc_segment(a.segs, a.n_segs, d);
    int64_t ld = (int64_t)d - sg->doc_base;
    int64_t b = sg->doc_off[ld], e = sg->doc_off[ld + 1];
    for (uint32_t j = lane; j < a.m; j += 32) {
        float v = -INFINITY;
        for (int64_t t = b; t < e; t++) {
            float s = a.S_km[(size_t)__ldg(sg->tok_cid + t) * a.m + j];
            v = s > v ? s : v; // the CPU's comparison: NaN never wins
        }
        mx[j] = v;
    }
    __syncwarp();
    if (lane == 0) {
        float s = 0.0f;
        for (uint32_t j = 0; j < a.m; j++) s += mx[j];
        a.scores[i] = e > b ? s : -INFINITY;
    }
}

// Centroid-interaction scores of w->d_out_ids[0..n) into w->d_out_scores.
chimera_status cu_score_ci_run(cu_ctx *c, cu_worker *w, uint32_t n, chimera_error *err)
{
    ci_args a;
    a.docs = w->d_out_ids;
    a.n_docs_list = n;
    a.m = w->m;
    a.segs = c->r.d_segs;
    a.n_segs = c->r.n_segs;
    a.S_km = w->d_S_km;
    a.scores = w->d_out_scores;
    size_t smem = (size_t)(CU_THREADS / 32) * w->m * sizeof(float); // 8 KiB at m = 256
    unsigned blocks = cu_div_up(n, CU_THREADS / 32);
    ci_kernel<<<blocks, CU_THREADS, smem, w->stream>>>(a);
    LAUNCH_CHECK();
    return CHIMERA_OK;
}
