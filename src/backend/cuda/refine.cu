// Candidate refinement on the device (paper §3.2 step 2, §4.1, §4.2; docs/design.md §2.3).
//
// Kernel 1, refine_est (one block per (query token j, group of CU_REFINE_LISTS_PER_BLOCK
// probed clusters), CU_THREADS threads, dim_pad*16 bytes of shared memory): the block
// copies token j's centred float LUT (qm_lut_build layout, built on the device from the
// rotated token by lut_build below) into shared memory, then for each probed cluster it
// takes that cluster's list in every segment of the index (cpu_refine's loop: appended
// documents are found exactly as built ones), and each thread takes posting entries of
// the list in turn: <b - 1/2, q'> by LUT (lut.cuh), the estimate
// qm_est1(<q_j, c>, factors, ip) with the f16 factors decoded by qm_f16_to_f32, and, fused
// with the next entry's arithmetic (paper §4.2), an atomicMax of its order-preserving key
// (docs/algorithms.md §3.2, common.cuh) into M[doc][j]. A warp's lanes read one 16-float LUT row
// per group (same-address reads broadcast), so the lookups are conflict-free. Postings
// carry local document numbers; the block adds the segment's doc_base, so M, the flags
// and the touched list are all by global document.
//
// Segments: the descriptors are a small device array (cu_resident.d_segs). The block
// finds its lists cooperatively, one thread per (probed cluster, segment), up to
// CU_THREADS of them a round, into shared memory: a lookup is a binary search over the
// segment's post_cid when its lists are sparse (an appended segment holds few clusters),
// a chain of dependent loads, so every thread searching every list itself would have
// serialised 8 lists x n_segments of those chains per block. Precomputing the lists per
// query on the host was rejected: it needs the probes on the host, a synchronisation
// the pipeline avoids. A built index is one dense segment, where the lookup is
// post_off[cid] as before, plus one __syncthreads.
//
// The table M: dense, n_docs x m int32 keys per worker, CU_KEY_EMPTY_MAX ("no estimate")
// between queries. Cost 4 * n_docs * max_m bytes per worker (128 MiB at 10^6 documents
// and m = 32; 1.2 GiB at 10^7), plus 16 bytes per document for the touched flag, list
// and selection key. Chosen over a hash because the index's documents and 1-bit codes are
// on the device anyway (at 100 tokens per document and d = 128, the codes alone are
// 2 x 16 x 100 = 3.2 KB per document against the table's 128 B), an atomicMax needs a
// fixed address, and a hash insert per posting entry would cost a probe sequence plus a
// CAS where the dense table costs one atomic. It is never cleared in full: the first
// touch of a document (a plain read of its flag, then an atomicCAS) appends it to the
// touched list, and kernel 2 resets exactly the rows it read.
//
// Unseen cells: as in cpu_backend.c, a cell nobody wrote reads as the token's imputed
// floor at summation time (PROBE_FLOOR: the n_probe-th centroid score of token j; ZERO;
// MIN_SEEN: the smallest estimate of token j, an atomicMin of keys after a block-level
// min, 0 when the token saw none). Initialising cells to the floor instead would differ
// from the reference whenever a token's best estimate is below the floor.
//
// Kernel 2, refine_sum (grid-stride over the touched list, one thread per document,
// floors in shared memory): sums the row in query-token order (the reference's order),
// resets the row and the flag, and writes the selection key cu_sel_key(sum, doc), or 0
// for a deleted document. Then the grid-wide radix select and the sort of the k_refine
// winners (topk.cuh): ties go to the smaller document id by construction of the key.
// Estimates use the exact query (LUT form), the CPU backend the 4-bit query (popcount
// form), so the two agree within the query-quantisation error, not bit for bit.
#include <cfloat>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/lut.cuh"

__global__ void lut_build_kernel(const float *qrot, uint32_t dim_pad, float *lut)
{
    uint32_t j = blockIdx.x;
    const float *q = qrot + (size_t)j * dim_pad;
    float *L = lut + (size_t)j * dim_pad * 4;
    // qm_lut_build over one group is that group's part of the whole-token build.
    for (uint32_t g = threadIdx.x; g < dim_pad / 4; g += blockDim.x)
        qm_lut_build(q + 4 * g, 4, L + 16 * g);
}

chimera_status cu_lut_build(cu_ctx *c, cu_worker *w, chimera_error *err)
{
    lut_build_kernel<<<w->m, 128, 0, w->stream>>>(w->d_qrot, c->r.dim_pad, w->d_lut);
    LAUNCH_CHECK();
    return CHIMERA_OK;
}

__global__ void fill_i32_kernel(int32_t *p, size_t n, int32_t v)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

chimera_status cu_fill_i32(cudaStream_t s, int32_t *p, size_t n, int32_t v, chimera_error *err)
{
    if (n == 0) return CHIMERA_OK;
    size_t blocks = (n + CU_THREADS - 1) / CU_THREADS;
    if (blocks > 65536) blocks = 65536;
    fill_i32_kernel<<<(unsigned)blocks, CU_THREADS, 0, s>>>(p, n, v);
    LAUNCH_CHECK();
    return CHIMERA_OK;
}

struct refine_args {
    const float *lut;            // [m][dim_pad*4]
    const uint32_t *probe_cid;   // [m][np]
    const float *probe_qc;
    uint32_t m, np, n_groups, dim_pad, n_words, code_bytes, n_clusters;
    const cu_segment *segs;      // [n_segs] device descriptors
    uint32_t n_segs;
    int32_t *M;
    uint32_t *flag, *touched;
    int32_t *minkey;
    cu_refine_counters *cnt;
};

// Segments whose lists one round of refine_est looks up: a thread per (list, segment).
#define REFINE_SEGS_PER_ROUND (CU_THREADS / CU_REFINE_LISTS_PER_BLOCK)
static_assert(REFINE_SEGS_PER_ROUND >= 1, "a round must take a segment");
// Static shared memory of refine_est besides the LUT: the round's lists, the warp minima.
#define REFINE_STATIC_SMEM (CU_THREADS * 16 + CU_THREADS / 32 * 4)

template <int NW>
__global__ void __launch_bounds__(CU_THREADS) refine_est_kernel(refine_args a)
{
    extern __shared__ float4 refine_smem[];
    float *lut = reinterpret_cast<float *>(refine_smem);
    __shared__ float warp_min[CU_THREADS / 32];
    __shared__ int64_t list_p0[CU_THREADS], list_n[CU_THREADS]; // this round's lists
    uint32_t j = blockIdx.x / a.n_groups, grp = blockIdx.x % a.n_groups;
    // The LUT: dim_pad*4 floats, a multiple of 256, so whole float4s.
    const float4 *src = reinterpret_cast<const float4 *>(a.lut + (size_t)j * a.dim_pad * 4);
    for (uint32_t i = threadIdx.x; i < a.dim_pad; i += blockDim.x) refine_smem[i] = src[i];
    __syncthreads();
    float local_min = FLT_MAX;
    unsigned long long scored = 0;
    uint32_t p_begin = grp * CU_REFINE_LISTS_PER_BLOCK, p_end = p_begin + CU_REFINE_LISTS_PER_BLOCK;
    if (p_end > a.np) p_end = a.np;
    uint32_t n_p = p_end - p_begin;
    // Up to REFINE_SEGS_PER_ROUND segments a round: one thread per (probed cluster,
    // segment) finds the list, then the whole block scans each found list in turn.
    for (uint32_t s0 = 0; s0 < a.n_segs; s0 += REFINE_SEGS_PER_ROUND) { // block-uniform
        uint32_t ns = a.n_segs - s0 < REFINE_SEGS_PER_ROUND ? a.n_segs - s0 : REFINE_SEGS_PER_ROUND;
        uint32_t n_find = n_p * ns;
        if (threadIdx.x < n_find) {
            uint32_t p = p_begin + threadIdx.x / ns, si = s0 + threadIdx.x % ns;
            uint32_t cid = a.probe_cid[(size_t)j * a.np + p];
            int64_t p0 = 0, n = 0;
            // cid >= n_clusters: the padding of a graph probe that found fewer centroids
            if (cid < a.n_clusters) cu_segment_list(a.segs + si, cid, &p0, &n);
            list_p0[threadIdx.x] = p0;
            list_n[threadIdx.x] = n;
        }
        __syncthreads();
        for (uint32_t e = 0; e < n_find; e++) {
            int64_t p0 = list_p0[e], n = list_n[e];
            if (n == 0) continue;
            const cu_segment *sg = a.segs + s0 + e % ns;
            float qc = a.probe_qc[(size_t)j * a.np + p_begin + e / ns];
            scored += (unsigned long long)n;
            const uint8_t *codes = sg->c1_codes;
            const quant_f1 *fact = sg->c1_fact;
            const uint32_t *post_doc = sg->post_doc;
            uint32_t base = (uint32_t)sg->doc_base; // n_docs < 2^32 - 1: checked at upload
            for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
                int64_t pos = p0 + t;
                const uint8_t *code = codes + (size_t)pos * a.code_bytes;
                cu_code<NW> cw;
                cu_code_load<NW>(cw, code);
                quant_f1 f = fact[pos];
                uint32_t d = base + __ldg(post_doc + pos);
                float ip = cu_lut_ip<NW>(lut, cw, code, a.n_words);
                float est = qm_est1(qc, &f, ip);
                if (*(volatile uint32_t *)(a.flag + d) == 0u && atomicCAS(a.flag + d, 0u, 1u) == 0u)
                    a.touched[atomicAdd(&a.cnt->n_touched, 1u)] = d;
                atomicMax(a.M + (size_t)d * a.m + j, cu_fkey(est));
                local_min = fminf(local_min, est);
            }
        }
        __syncthreads(); // every thread is done with this round's lists before the next
    }
    // Block minimum, then one atomicMin per block. Every lane of every warp reaches the
    // shuffles (the loops above end for all), so the full mask is valid.
    for (int o = 16; o > 0; o >>= 1)
        local_min = fminf(local_min, __shfl_xor_sync(0xffffffffu, local_min, o));
    if ((threadIdx.x & 31) == 0) warp_min[threadIdx.x >> 5] = local_min;
    __syncthreads();
    if (threadIdx.x == 0) {
        float mn = FLT_MAX;
        for (uint32_t i = 0; i < blockDim.x / 32; i++) mn = fminf(mn, warp_min[i]);
        if (scored > 0) {
            atomicMin(a.minkey + j, cu_fkey(mn));
            atomicAdd(&a.cnt->tokens_scored, scored);
        }
    }
}

struct sum_args {
    const uint32_t *touched;
    const cu_refine_counters *cnt;
    int32_t *M;
    uint32_t *flag;
    const uint8_t *deleted;
    const uint8_t *allow; /* the search filter's bitmap, or NULL */
    const int32_t *minkey;
    const float *probe_qc;
    uint32_t m, np;
    int impute;
    float floor_scale;
    unsigned long long *keys;
};

__global__ void __launch_bounds__(CU_THREADS) refine_sum_kernel(sum_args a)
{
    __shared__ float floor_[QUANT_QTOK_MAX];
    for (uint32_t j = threadIdx.x; j < a.m; j += blockDim.x) {
        float f;
        if (a.impute == BE_IMPUTE_ZERO) f = 0.0f;
        else if (a.impute == BE_IMPUTE_MIN_SEEN)
            f = a.minkey[j] == CU_KEY_EMPTY_MIN ? 0.0f : cu_funkey(a.minkey[j]);
        else f = be_probe_floor(a.probe_qc[(size_t)j * a.np + a.np - 1], a.floor_scale);
        floor_[j] = f;
    }
    __syncthreads();
    uint32_t n = a.cnt->n_touched;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t d = a.touched[i];
        int32_t *row = a.M + (size_t)d * a.m;
        float sum = 0.0f;
        for (uint32_t j = 0; j < a.m; j++) {
            int32_t k = row[j];
            /* the floor is what an unprobed token of the document is taken to score, so
             * a seen token counts only if it beats it (WARP's max with m_i) */
            float v = k == CU_KEY_EMPTY_MAX ? floor_[j] : cu_funkey(k);
            sum += v > floor_[j] ? v : floor_[j];
            row[j] = CU_KEY_EMPTY_MAX;
        }
        a.flag[d] = 0u;
        int del = (a.deleted[d >> 3] >> (d & 7)) & 1;
        if (a.allow && !((a.allow[d >> 3] >> (d & 7)) & 1)) del = 1; /* filtered out */
        a.keys[i] = del ? 0ull : cu_sel_key(sum, d);
    }
}

chimera_status cu_refine_prepare(cu_ctx *c, chimera_error *err)
{
    size_t smem = (size_t)c->r.dim_pad * 16;
    if (smem + REFINE_STATIC_SMEM > c->smem_optin)
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "cuda backend: refinement needs %zu bytes of shared memory for the LUT "
                       "(dim_pad %u) and %d more, the device allows %zu",
                       smem, c->r.dim_pad, REFINE_STATIC_SMEM, c->smem_optin);
#define REFINE_ATTR(NW)                                                                        \
    CUDA_CHECK(cudaFuncSetAttribute(refine_est_kernel<NW>,                                     \
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))
    CU_DISPATCH_NW(c->r.dim_pad / 32, REFINE_ATTR)
#undef REFINE_ATTR
    return CHIMERA_OK;
}

chimera_status cu_refine_run(cu_ctx *c, cu_worker *w, uint32_t k_refine, be_floor imp,
                             chimera_error *err)
{
    const cu_resident *r = &c->r;
    cudaStream_t s = w->stream;
    uint32_t m = w->m, np = w->n_probe;
    if (w->table_dirty) { // a failed refinement left rows and flags set: start clean
        size_t D = (size_t)r->n_docs;
        CM_TRY(cu_fill_i32(s, w->d_M, D * c->cfg.max_m, CU_KEY_EMPTY_MAX, err));
        if (D) CUDA_CHECK(cudaMemsetAsync(w->d_flag, 0, D * sizeof(uint32_t), s));
        w->table_dirty = 0;
    }
    CUDA_CHECK(cudaMemsetAsync(w->d_cnt, 0, sizeof *w->d_cnt, s));
    CUDA_CHECK(cudaMemsetAsync(w->d_sel, 0, sizeof *w->d_sel, s));
    CUDA_CHECK(cudaMemsetAsync(w->d_hist, 0, CU_RADIX_BINS * sizeof(uint32_t), s));
    CM_TRY(cu_fill_i32(s, w->d_minkey, m, CU_KEY_EMPTY_MIN, err));
    if (c->poison) {
        size_t nd = (size_t)r->n_docs;
        CUDA_CHECK(cudaMemsetAsync(w->d_cand, 0xff, nd * sizeof *w->d_cand, s));
        CUDA_CHECK(cudaMemsetAsync(w->d_out_ids, 0xff, (size_t)c->cfg.max_refine * 4, s));
        CUDA_CHECK(cudaMemsetAsync(w->d_out_scores, 0xff, (size_t)c->cfg.max_refine * 4, s));
    }
    refine_args a;
    a.lut = w->d_lut;
    a.probe_cid = w->d_probe_cid;
    a.probe_qc = w->d_probe_qc;
    a.m = m;
    a.np = np;
    a.n_groups = cu_div_up(np, CU_REFINE_LISTS_PER_BLOCK);
    a.dim_pad = r->dim_pad;
    a.n_words = r->dim_pad / 32;
    a.code_bytes = r->code_bytes;
    a.n_clusters = r->n_clusters;
    a.segs = r->d_segs;
    a.n_segs = r->n_segs;
    a.M = w->d_M;
    a.flag = w->d_flag;
    a.touched = w->d_touched;
    a.minkey = w->d_minkey;
    a.cnt = w->d_cnt;
    size_t smem = (size_t)r->dim_pad * 16;
    unsigned blocks = m * a.n_groups; // <= 256 * 512 (max_m, CU_MAX_PROBE / 8)
#define REFINE_LAUNCH(NW)                                                                      \
    refine_est_kernel<NW><<<blocks, CU_THREADS, smem, s>>>(a)
    w->table_dirty = 1; /* until refine_sum has reset what refine_est writes */
    CU_DISPATCH_NW(a.n_words, REFINE_LAUNCH)
#undef REFINE_LAUNCH
    LAUNCH_CHECK();

    sum_args b;
    b.touched = w->d_touched;
    b.cnt = w->d_cnt;
    b.M = w->d_M;
    b.flag = w->d_flag;
    b.deleted = r->deleted;
    b.allow = w->allow_on ? w->d_allow : nullptr;
    b.minkey = w->d_minkey;
    b.probe_qc = w->d_probe_qc;
    b.m = m;
    b.np = np;
    b.impute = (int)imp.impute;
    b.floor_scale = imp.scale;
    b.keys = w->d_cand;
    unsigned grid = (unsigned)(c->n_sm * CU_BLOCKS_PER_SM);
    refine_sum_kernel<<<grid, CU_THREADS, 0, s>>>(b);
    LAUNCH_CHECK();
    w->table_dirty = 0;

    const uint32_t *n_touched = &w->d_cnt->n_touched;
    for (int pass = 0; pass < 8; pass++) {
        cu_sel_hist_kernel<<<grid, CU_THREADS, 0, s>>>(w->d_cand, n_touched, w->d_sel, w->d_hist);
        LAUNCH_CHECK();
        cu_sel_pick_kernel<<<1, CU_THREADS, 0, s>>>(w->d_sel, w->d_hist, k_refine);
        LAUNCH_CHECK();
    }
    uint32_t P = cu_next_pow2(k_refine);
    cu_sel_gather_kernel<<<grid, CU_THREADS, 0, s>>>(w->d_cand, n_touched, w->d_sel, w->d_sel_out,
                                                     &w->d_cnt->n_out, k_refine);
    LAUNCH_CHECK();
    size_t sort_smem = (size_t)P * sizeof(unsigned long long);
    int use_smem = sort_smem <= 48u * 1024u;
    cu_sel_sort_kernel<<<1, 1024, use_smem ? sort_smem : 0, s>>>(
        w->d_sel_out, &w->d_cnt->n_out, P, use_smem, w->d_out_ids, w->d_out_scores);
    LAUNCH_CHECK();
    return CHIMERA_OK;
}
