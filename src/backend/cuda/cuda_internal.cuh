// The CUDA backend's state and the launchers each kernel family exports to backend.cu.
// Every launcher enqueues on the worker's stream, checks its launches and returns a
// status; none of them synchronises (backend.cu does, once per stage, where results go
// back to the host).
#ifndef CHIMERA_BACKEND_CUDA_INTERNAL_CUH
#define CHIMERA_BACKEND_CUDA_INTERNAL_CUH

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/topk.cuh"

extern "C" {
#include "backend/backend.h"
#include "quant/rabitq.h"
}

// Threads of the grid-stride kernels and their fixed grid (blocks per SM).
#define CU_THREADS 256
#define CU_BLOCKS_PER_SM 4

// Probe: largest n_probe (the brute-force selection sorts next_pow2(n_probe) keys in
// shared memory) and the graph search's largest candidate list (algorithms.md §2.3: single
// CTA up to 512); AUTO takes the graph only from CU_GRAPH_MIN_K centroids (centroid.cu).
#define CU_MAX_PROBE 4096
#define CU_GRAPH_ITOPK_MAX 512
#define CU_GRAPH_MIN_K (1u << 20)

// Refinement: probed lists per block (a block loads its query token's LUT once for them).
#define CU_REFINE_LISTS_PER_BLOCK 8

// Document scoring: documents per block and the LUT tile budget in shared memory.
#define CU_SCORE_DOCS_PER_BLOCK 8
#define CU_SCORE_LUT_BYTES (32u * 1024u)

enum { CU_ST_BEGIN = 0, CU_ST_PROBE, CU_ST_REFINE, CU_ST_SCORE1, CU_ST_CI, CU_N_STAGES };

// One segment on the device (be_segment, uploaded once, by upload or refresh): its own
// buffers, numbers local to the segment as on the host. The kernels read these
// descriptors from a small device array (cu_resident.d_segs), so a kernel covers every
// segment in one launch: refinement scans a probed cluster's list in each, document
// scoring finds each document's segment by doc_base.
struct cu_segment {
    int64_t doc_base, n_docs, n_tokens;
    uint32_t n_lists;
    uint32_t *post_cid;           // [n_lists] cluster of each list; NULL: list l is cluster l
    int64_t *post_off;            // [n_lists + 1]
    uint32_t *post_doc;           // [N] local documents
    uint8_t *c1_codes, *d1_codes;
    quant_f1 *c1_fact, *d1_fact;
    uint32_t *tok_cid;            // [N] global centroid ids
    int64_t *doc_off;             // [n_docs + 1] local token offsets
};

// Device-resident index data (be_resident: the shared arrays uploaded once, segments
// appended by refresh).
struct cu_resident {
    uint32_t dim, dim_pad, code_bytes, n_clusters, degree, n_entry;
    int64_t n_docs, n_tokens;     // over all segments
    float *centroids;
    uint32_t *graph_adj, *graph_entry;
    uint32_t n_segs, cap_segs;
    cu_segment *segs;             // host array [cap_segs] of device buffers, n_segs used
    be_segment *src_segs;         // host array [cap_segs]: the be_segment each came from,
                                  // what refresh compares (pointers only, never read)
    cu_segment *d_segs;           // device copy of segs[0..n_segs)
    uint8_t *deleted;             // [ceil(n_docs/8)]
};

// The segment of global document d (as be_doc_segment): the last one whose doc_base is
// <= d. segs: n >= 1 descriptors by increasing doc_base, the first at 0.
__device__ static inline uint32_t cu_doc_segment(const cu_segment *segs, uint32_t n, int64_t d)
{
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (segs[mid].doc_base <= d) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Posting list of cluster cid in segment sg (as be_segment_list): positions
// [*p0, *p0 + *n), empty when the segment has no list for cid.
__device__ static inline void cu_segment_list(const cu_segment *sg, uint32_t cid, int64_t *p0,
                                              int64_t *n)
{
    uint32_t l = cid, n_lists = sg->n_lists;
    const uint32_t *pc = sg->post_cid;
    *p0 = 0;
    *n = 0;
    if (pc) {
        uint32_t lo = 0, hi = n_lists;
        while (lo < hi) {
            uint32_t mid = (lo + hi) / 2;
            if (pc[mid] < cid) lo = mid + 1;
            else hi = mid;
        }
        if (lo == n_lists || pc[lo] != cid) return;
        l = lo;
    } else if (cid >= n_lists) {
        return;
    }
    *p0 = sg->post_off[l];
    *n = sg->post_off[l + 1] - *p0;
}

// Refinement outputs the host reads back in one copy.
struct cu_refine_counters {
    uint32_t n_touched, n_out;
    unsigned long long tokens_scored;
};

struct cu_worker {
    cudaStream_t stream;
    cublasHandle_t blas;
    cudaEvent_t ev[CU_N_STAGES][2], ev_up; // per-stage start/end; query upload done
    cudaEvent_t ev_sync; // sync_worker's blocking-sync event (CHIMERA_CUDA_SYNC=block), or null
    int stage_pending[CU_N_STAGES];
    double stage_ms[CU_N_STAGES];
    uint64_t stage_calls[CU_N_STAGES], bytes_up, bytes_down;
    uint64_t walked;              // probes the graph walks returned (probes_walked)
    // query
    uint32_t m, n_probe;
    float *d_q, *d_qrot, *d_lut;  // [max_m x dim], [max_m x dim_pad], [max_m x dim_pad*4]
    float *d_S_km, *d_S_mk;       // [K x m] (document scoring), [m x K] (probe)
    uint32_t *d_probe_cid;        // [max_m x max_probe]
    float *d_probe_qc;
    // refinement
    // The per-document scratch below is sized for doc_cap >= n_docs documents (refresh
    // grows it when segments add documents).
    size_t doc_cap;
    int32_t *d_M;                 // [doc_cap x max_m] order-preserving keys, CU_KEY_EMPTY_MAX between queries
    uint8_t *d_allow;             // [allow_cap] the current query's filter bitmap
    size_t allow_cap;             // bytes of d_allow (grown on demand)
    int allow_on;                 // 1: refine applies d_allow
    uint32_t *d_flag;             // [doc_cap] 1 while a document is in the touched list
    int table_dirty;              // a refinement failed between its two kernels: d_M and
                                  // d_flag must be reset before the next one
    uint32_t *d_touched;          // [doc_cap]
    unsigned long long *d_cand;   // [doc_cap] selection keys of the touched documents
    int32_t *d_minkey;            // [max_m] smallest estimate per query token (MIN_SEEN)
    cu_refine_counters *d_cnt;
    cu_sel_state *d_sel;
    uint32_t *d_hist;             // [CU_RADIX_BINS]
    unsigned long long *d_sel_out; // [next_pow2(max_refine)]
    uint32_t *d_out_ids;          // [max_refine] refine results / score1 document ids
    float *d_out_scores;          // [max_refine]
    // pinned host buffers
    float *h_q;                   // [max_m x (dim + dim_pad)]
    uint32_t *h_ids;              // [max(max_refine, max_m * max_probe)]
    float *h_scores;
    cu_refine_counters *h_cnt;
};

struct cu_ctx {
    int device, n_sm, poison;
    int blocking_sync; // CHIMERA_CUDA_SYNC=block: workers sleep while they wait (backend.cu)
    int ready; // upload completed: workers and resident data usable
    size_t smem_optin;
    be_config cfg;
    const quant_rotation *rot;
    be_resident src; // the uploaded be_resident's shared fields (segments, deleted: unset),
                     // what refresh compares
    cu_resident r;
    uint32_t itopk_cap; // graph search: candidate list length cap (<= CU_GRAPH_ITOPK_MAX)
    cu_worker *w;
    int n_workers_init; // workers whose stream/handle exist
};

// centroid.cu
chimera_status cu_centroid_km(cu_ctx *c, cu_worker *w, chimera_error *err);
chimera_status cu_probe_brute(cu_ctx *c, cu_worker *w, uint32_t n_probe, chimera_error *err);
chimera_status cu_probe_graph(cu_ctx *c, cu_worker *w, uint32_t n_probe, chimera_error *err);
int cu_graph_usable(const cu_ctx *c, uint32_t n_probe);
size_t cu_graph_smem(const cu_ctx *c, uint32_t n_probe);
size_t cu_probe_brute_smem(uint32_t n_probe);
chimera_status cu_centroid_prepare(cu_ctx *c, chimera_error *err);
// refine.cu
chimera_status cu_refine_run(cu_ctx *c, cu_worker *w, uint32_t k_refine, be_floor imp,
                             chimera_error *err);
chimera_status cu_refine_prepare(cu_ctx *c, chimera_error *err);
chimera_status cu_lut_build(cu_ctx *c, cu_worker *w, chimera_error *err);
chimera_status cu_fill_i32(cudaStream_t s, int32_t *p, size_t n, int32_t v, chimera_error *err);
// docscore.cu
chimera_status cu_score1_run(cu_ctx *c, cu_worker *w, uint32_t n, chimera_error *err);
chimera_status cu_score1_prepare(cu_ctx *c, chimera_error *err);
size_t cu_score1_smem(const cu_ctx *c, uint32_t *tq);
chimera_status cu_score_ci_run(cu_ctx *c, cu_worker *w, uint32_t n, chimera_error *err);

#endif
