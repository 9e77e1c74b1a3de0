// The CUDA backend (backend.h): residency, per-worker query state, and the stage entry
// points of the vtable; the kernels are in centroid.cu, refine.cu, docscore.cu, topk.cu.
//
// Residency: upload copies every be_resident array once (cudaMalloc + cudaMemcpy): the
// shared arrays (centroids, graph), each segment's arrays into buffers of its own, a
// small device array of the segment descriptors (cu_segment) that the kernels index, and
// the deletion bitmap. It first checks that the resident bytes plus every worker's
// scratch fit in be_config.device_memory_budget (0: the device's free memory less a
// reserve for the context and cuBLAS); when they do not, it fails with
// CHIMERA_ERR_DEVICE and both numbers, before allocating anything, so search/ can fall
// back to the CPU backend.
//
//   resident = 4*K*dim (centroids) + 4*K*degree + 4*n_entry (graph)
//            + per segment: 8*(L+1) (post_off) + 4*L if sparse (post_cid)
//              + N*(4 + 2*dim_pad/8 + 2*6 + 4) (post_doc, both 1-bit planes and factors,
//              tok_cid) + 8*(D+1) (doc_off), with L, N, D the segment's lists, tokens
//              and documents
//            + sizeof(cu_segment) per segment (descriptors) + ceil(D/8) (deleted)
//   worker   = 4*max_m*(dim + dim_pad + 4*dim_pad) (query, rotated query, LUTs)
//            + 8*K*max_m (S in both layouts) + 8*max_m*max_probe (probes)
//            + D*(4*max_m + 16) (refinement table, flag, touched list, selection key,
//              over all documents)
//            + 8*next_pow2(max_refine) + 8*max_refine + small
//   pinned host per worker = 4*max_m*(dim + dim_pad) + 8*max(max_refine, max_m*max_probe)
//
// Per query, per worker: the query tokens go up twice over (as given, for the centroid
// scores, and rotated on the host by quant_rotate, for the LUTs: m*(dim + dim_pad)*4
// bytes, 32 KiB at m = 32, d = 128; rotating on the device would halve that), probe ids
// and scores come down only when the caller asks for them, refinement results
// (8*k_refine bytes + 16) and document scores (4 bytes each, after 4 bytes of id up)
// come down. S stays on the device (host_centroid_scores is NULL).
//
// Refresh (documents appended as segments, deletions): the index passes a be_resident
// that extends the uploaded one. Only what is new goes up: the new segments, the
// descriptor array and the bitmap; each worker's per-document scratch grows when the
// document count does. Whether it extends the uploaded one is decided by host pointers
// (the shared arrays, and every field of each uploaded segment): the backend never
// re-reads host data it has uploaded, so a changed array under an unchanged pointer
// would go unnoticed, and index/ must not rewrite a segment in place. Anything else
// (a rebuilt or compacted index) is refused with CHIMERA_ERR_INVALID_ARG and the engine
// is made anew. The new state is staged and committed last, so a failed refresh leaves
// the engine serving the index as it was.
//
// Each worker has its own stream, cuBLAS handle, pinned buffers and CUDA events around
// each stage; the stage times (device time between the events) and transfer bytes are
// totalled per worker and printed at release when CHIMERA_CUDA_PROFILE is set. With
// CHIMERA_CUDA_POISON set, every device output buffer is filled with 0xff bytes before
// the kernels that write it, so a result a kernel failed to write shows up as NaN /
// UINT32_MAX instead of a stale value (the tests set it). With CHIMERA_CUDA_SYNC=block a
// worker waiting for its stream sleeps (a blocking-sync event) instead of spinning on a
// core, the runtime's default with fewer contexts than cores: with as many workers as
// cores, the spinning threads compete with the host threads' full-bit scoring. The
// default stays until a GPU run measures both (scripts/gpu-check.sh does).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_internal.cuh"

extern "C" {
#include "backend/cuda/cuda_api.h"
#include "core/alloc.h" // last: poisons malloc/free
}

#define CU_MEM_RESERVE ((size_t)256 << 20) // context, cuBLAS workspaces, fragmentation

static const char *const stage_name[CU_N_STAGES] = {"query_begin", "probe", "refine", "score1",
                                                     "score_ci"};

// ---- sizes ---------------------------------------------------------------------------

// Device bytes of one segment's arrays (segment_upload).
static size_t segment_bytes(const be_segment *sg, uint32_t dim_pad)
{
    size_t L = sg->n_lists, N = (size_t)sg->n_tokens, D = (size_t)sg->n_docs, cb = dim_pad / 8;
    return (sg->post_cid ? 4 * L : 0) + 8 * (L + 1) +
           N * (4 + 2 * cb + 2 * sizeof(quant_f1) + 4) + 8 * (D + 1);
}

// Device bytes of the segment descriptors and the deletion bitmap (replaced whole by
// refresh).
static size_t index_bytes(uint32_t n_segments, int64_t n_docs)
{
    return (size_t)n_segments * sizeof(cu_segment) + ((size_t)n_docs + 7) / 8;
}

static size_t resident_bytes(const be_resident *r)
{
    size_t K = r->n_clusters, b = 4 * K * r->dim + 4 * K * r->degree + 4 * (size_t)r->n_entry;
    for (uint32_t i = 0; i < r->n_segments; i++) b += segment_bytes(&r->segments[i], r->dim_pad);
    return b + index_bytes(r->n_segments, r->n_docs);
}

// A worker's per-document scratch (doc_scratch_new) for D documents.
static size_t doc_scratch_bytes(size_t D, uint32_t max_m)
{
    return D * (4 * (size_t)max_m + 16);
}

static size_t host_ids_cap(const be_config *cfg)
{
    size_t a = cfg->max_refine, b = (size_t)cfg->max_m * cfg->max_probe;
    return a > b ? a : b;
}

static size_t worker_bytes(const be_resident *r, const be_config *cfg)
{
    size_t mm = cfg->max_m, K = r->n_clusters;
    return 4 * mm * (r->dim + r->dim_pad + 4 * (size_t)r->dim_pad) + 8 * K * mm +
           8 * mm * cfg->max_probe + doc_scratch_bytes((size_t)r->n_docs, cfg->max_m) + 4 * mm +
           8 * (size_t)cu_next_pow2(cfg->max_refine) + 8 * (size_t)cfg->max_refine +
           sizeof(cu_refine_counters) + sizeof(cu_sel_state) + 4 * CU_RADIX_BINS;
}

// ---- release -------------------------------------------------------------------------

// Teardown cannot report: errors are cleared and ignored.
#define CU_IGNORE(stmt)                                                                        \
    do {                                                                                       \
        if ((stmt) != cudaSuccess) cudaGetLastError();                                         \
    } while (0)

static void dfree(void *p)
{
    if (p) CU_IGNORE(cudaFree(p));
}

// Frees a segment's device buffers and zeroes the descriptor.
static void segment_free(cu_segment *sg)
{
    dfree(sg->post_cid);
    dfree(sg->post_off);
    dfree(sg->post_doc);
    dfree(sg->c1_codes);
    dfree(sg->d1_codes);
    dfree(sg->c1_fact);
    dfree(sg->d1_fact);
    dfree(sg->tok_cid);
    dfree(sg->doc_off);
    memset(sg, 0, sizeof *sg);
}

static void print_profile(const cu_ctx *c)
{
    for (int i = 0; i < c->n_workers_init; i++) {
        const cu_worker *w = &c->w[i];
        uint64_t nq = w->stage_calls[CU_ST_BEGIN];
        fprintf(stderr, "cuda worker %d: %llu queries", i, (unsigned long long)nq);
        for (int s = 0; s < CU_N_STAGES; s++)
            fprintf(stderr, ", %s %.3f ms/call (%llu)", stage_name[s],
                    w->stage_calls[s] ? w->stage_ms[s] / (double)w->stage_calls[s] : 0.0,
                    (unsigned long long)w->stage_calls[s]);
        if (nq)
            fprintf(stderr, ", %.1f B up / %.1f B down per query",
                    (double)w->bytes_up / (double)nq, (double)w->bytes_down / (double)nq);
        fputc('\n', stderr);
    }
}

static void cu_release(void *vctx)
{
    cu_ctx *c = (cu_ctx *)vctx;
    if (!c) return;
    if (c->w) {
        const char *prof = getenv("CHIMERA_CUDA_PROFILE");
        if (prof && *prof && strcmp(prof, "0") != 0) print_profile(c);
        for (int i = 0; i < c->cfg.n_workers; i++) {
            cu_worker *w = &c->w[i];
            if (w->stream) CU_IGNORE(cudaStreamSynchronize(w->stream));
            dfree(w->d_q);
            dfree(w->d_qrot);
            dfree(w->d_lut);
            dfree(w->d_S_km);
            dfree(w->d_S_mk);
            dfree(w->d_probe_cid);
            dfree(w->d_probe_qc);
            dfree(w->d_M);
            dfree(w->d_flag);
            dfree(w->d_allow);
            dfree(w->d_touched);
            dfree(w->d_cand);
            dfree(w->d_minkey);
            dfree(w->d_cnt);
            dfree(w->d_sel);
            dfree(w->d_hist);
            dfree(w->d_sel_out);
            dfree(w->d_out_ids);
            dfree(w->d_out_scores);
            if (w->h_q) CU_IGNORE(cudaFreeHost(w->h_q));
            if (w->h_ids) CU_IGNORE(cudaFreeHost(w->h_ids));
            if (w->h_scores) CU_IGNORE(cudaFreeHost(w->h_scores));
            if (w->h_cnt) CU_IGNORE(cudaFreeHost(w->h_cnt));
            for (int s = 0; s < CU_N_STAGES; s++)
                for (int e = 0; e < 2; e++)
                    if (w->ev[s][e]) CU_IGNORE(cudaEventDestroy(w->ev[s][e]));
            if (w->ev_up) CU_IGNORE(cudaEventDestroy(w->ev_up));
            if (w->ev_sync) CU_IGNORE(cudaEventDestroy(w->ev_sync));
            if (w->blas) cublasDestroy(w->blas);
            if (w->stream) CU_IGNORE(cudaStreamDestroy(w->stream));
        }
        cm_free(c->w);
    }
    cu_resident *r = &c->r;
    dfree(r->centroids);
    dfree(r->graph_adj);
    dfree(r->graph_entry);
    // every slot, not only the n_segs committed: a failed upload leaves its partial
    // segment in the next one (slots past it are zero)
    for (uint32_t i = 0; i < r->cap_segs; i++) segment_free(&r->segs[i]);
    cm_free(r->segs);
    cm_free(r->src_segs);
    dfree(r->d_segs);
    dfree(r->deleted);
    cm_free(c);
}

// ---- upload --------------------------------------------------------------------------

template <class T>
static chimera_status dalloc(T **p, size_t count, chimera_error *err)
{
    *p = nullptr;
    if (count == 0) return CHIMERA_OK;
    CUDA_CHECK(cudaMalloc((void **)p, count * sizeof(T)));
    return CHIMERA_OK;
}

template <class T>
static chimera_status dup(T **p, const T *src, size_t count, chimera_error *err)
{
    CM_TRY(dalloc(p, count, err));
    if (count == 0) return CHIMERA_OK;
    if (!src)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: a resident array is NULL");
    CUDA_CHECK(cudaMemcpy(*p, src, count * sizeof(T), cudaMemcpyHostToDevice));
    return CHIMERA_OK;
}

// Copies one segment's arrays into buffers of its own; *out (zero on entry) keeps what
// was allocated, also on failure, for segment_free.
static chimera_status segment_upload(const be_segment *sg, uint32_t code_bytes, cu_segment *out,
                                     chimera_error *err)
{
    size_t L = sg->n_lists, N = (size_t)sg->n_tokens, D = (size_t)sg->n_docs;
    out->doc_base = sg->doc_base;
    out->n_docs = sg->n_docs;
    out->n_tokens = sg->n_tokens;
    out->n_lists = sg->n_lists;
    // post_cid stays NULL for a dense segment, which is how the kernels tell the two
    // apart; a sparse one with no lists is empty either way.
    if (sg->post_cid) CM_TRY(dup(&out->post_cid, sg->post_cid, L, err));
    CM_TRY(dup(&out->post_off, sg->post_off, L + 1, err));
    CM_TRY(dup(&out->post_doc, sg->post_doc, N, err));
    CM_TRY(dup(&out->c1_codes, sg->c1_codes, N * code_bytes, err));
    CM_TRY(dup(&out->c1_fact, sg->c1_fact, N, err));
    CM_TRY(dup(&out->d1_codes, sg->d1_codes, N * code_bytes, err));
    CM_TRY(dup(&out->d1_fact, sg->d1_fact, N, err));
    CM_TRY(dup(&out->tok_cid, sg->tok_cid, N, err));
    CM_TRY(dup(&out->doc_off, sg->doc_off, D + 1, err));
    return CHIMERA_OK;
}

// Grows the host segment arrays to n slots, the new ones zero.
static chimera_status segs_reserve(cu_resident *d, uint32_t n, chimera_error *err)
{
    if (n <= d->cap_segs) return CHIMERA_OK;
    cu_segment *sg = (cu_segment *)cm_realloc(d->segs, (size_t)n * sizeof *sg);
    if (!sg) return cm_fail(err, CHIMERA_ERR_NOMEM, "cuda backend: out of memory");
    memset(sg + d->cap_segs, 0, (size_t)(n - d->cap_segs) * sizeof *sg);
    d->segs = sg;
    be_segment *src = (be_segment *)cm_realloc(d->src_segs, (size_t)n * sizeof *src);
    if (!src) return cm_fail(err, CHIMERA_ERR_NOMEM, "cuda backend: out of memory");
    d->src_segs = src;
    d->cap_segs = n;
    return CHIMERA_OK;
}

// The segments must tile the documents: the kernels add doc_base to local numbers and
// index per-document tables by the sum, and global documents are uint32 (selection keys).
static chimera_status check_segments(const be_resident *r, chimera_error *err)
{
    if (r->n_docs < 0 || r->n_docs >= (int64_t)UINT32_MAX || r->n_tokens < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: %lld documents",
                       (long long)r->n_docs);
    if (r->n_segments > 0 && !r->segments)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: no segment array");
    int64_t docs = 0, toks = 0;
    for (uint32_t i = 0; i < r->n_segments; i++) {
        const be_segment *sg = &r->segments[i];
        if (sg->doc_base != docs || sg->n_docs < 0 || sg->n_tokens < 0)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "cuda backend: segment %u: documents %lld + %lld (expected base %lld)",
                           i, (long long)sg->doc_base, (long long)sg->n_docs, (long long)docs);
        docs += sg->n_docs;
        toks += sg->n_tokens;
    }
    if (docs != r->n_docs || toks != r->n_tokens)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "cuda backend: segments hold %lld documents, %lld tokens; the index %lld, %lld",
                       (long long)docs, (long long)toks, (long long)r->n_docs,
                       (long long)r->n_tokens);
    return CHIMERA_OK;
}

// A worker's per-document scratch (cu_worker: d_M, d_flag, d_touched, d_cand).
struct doc_scratch {
    int32_t *M;
    uint32_t *flag, *touched;
    unsigned long long *cand;
};

static void doc_scratch_free(doc_scratch *ds)
{
    dfree(ds->M);
    dfree(ds->flag);
    dfree(ds->touched);
    dfree(ds->cand);
    memset(ds, 0, sizeof *ds);
}

// Allocates the scratch for D documents and enqueues, on the worker's stream, its
// between-queries state: every cell of the table "no estimate", every flag 0. *ds keeps
// what was allocated, also on failure.
static chimera_status doc_scratch_new(const cu_ctx *c, cu_worker *w, size_t D, doc_scratch *ds,
                                      chimera_error *err)
{
    size_t mm = c->cfg.max_m;
    memset(ds, 0, sizeof *ds);
    CM_TRY(dalloc(&ds->M, D * mm, err));
    CM_TRY(dalloc(&ds->flag, D, err));
    CM_TRY(dalloc(&ds->touched, D, err));
    CM_TRY(dalloc(&ds->cand, D, err));
    CM_TRY(cu_fill_i32(w->stream, ds->M, D * mm, CU_KEY_EMPTY_MAX, err));
    if (D) CUDA_CHECK(cudaMemsetAsync(ds->flag, 0, D * sizeof(uint32_t), w->stream));
    return CHIMERA_OK;
}

static void doc_scratch_set(cu_worker *w, const doc_scratch *ds, size_t D)
{
    w->d_M = ds->M;
    w->d_flag = ds->flag;
    w->d_touched = ds->touched;
    w->d_cand = ds->cand;
    w->doc_cap = D;
}

static chimera_status worker_init(cu_ctx *c, cu_worker *w, chimera_error *err)
{
    const be_config *cfg = &c->cfg;
    size_t mm = cfg->max_m, K = c->r.n_clusters, D = (size_t)c->r.n_docs;
    CUDA_CHECK(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&w->blas));
    CUBLAS_CHECK(cublasSetStream(w->blas, w->stream));
    CUBLAS_CHECK(cublasSetMathMode(w->blas, CUBLAS_DEFAULT_MATH));
    for (int s = 0; s < CU_N_STAGES; s++)
        for (int e = 0; e < 2; e++) CUDA_CHECK(cudaEventCreate(&w->ev[s][e]));
    unsigned ev_flags = cudaEventDisableTiming | (c->blocking_sync ? cudaEventBlockingSync : 0u);
    CUDA_CHECK(cudaEventCreateWithFlags(&w->ev_up, ev_flags));
    if (c->blocking_sync) CUDA_CHECK(cudaEventCreateWithFlags(&w->ev_sync, ev_flags));
    CM_TRY(dalloc(&w->d_q, mm * c->r.dim, err));
    CM_TRY(dalloc(&w->d_qrot, mm * c->r.dim_pad, err));
    CM_TRY(dalloc(&w->d_lut, mm * c->r.dim_pad * 4, err));
    CM_TRY(dalloc(&w->d_S_km, K * mm, err));
    CM_TRY(dalloc(&w->d_S_mk, K * mm, err));
    CM_TRY(dalloc(&w->d_probe_cid, mm * cfg->max_probe, err));
    CM_TRY(dalloc(&w->d_probe_qc, mm * cfg->max_probe, err));
    doc_scratch ds;
    chimera_status s = doc_scratch_new(c, w, D, &ds, err);
    doc_scratch_set(w, &ds, D); // release frees a partial one too
    CM_TRY(s);
    CM_TRY(dalloc(&w->d_minkey, mm, err));
    CM_TRY(dalloc(&w->d_cnt, 1, err));
    CM_TRY(dalloc(&w->d_sel, 1, err));
    CM_TRY(dalloc(&w->d_hist, CU_RADIX_BINS, err));
    CM_TRY(dalloc(&w->d_sel_out, cu_next_pow2(cfg->max_refine), err));
    CM_TRY(dalloc(&w->d_out_ids, cfg->max_refine, err));
    CM_TRY(dalloc(&w->d_out_scores, cfg->max_refine, err));
    CUDA_CHECK(cudaHostAlloc((void **)&w->h_q, mm * (c->r.dim + c->r.dim_pad) * sizeof(float),
                             cudaHostAllocDefault));
    CUDA_CHECK(cudaHostAlloc((void **)&w->h_ids, host_ids_cap(cfg) * sizeof(uint32_t),
                             cudaHostAllocDefault));
    CUDA_CHECK(cudaHostAlloc((void **)&w->h_scores, host_ids_cap(cfg) * sizeof(float),
                             cudaHostAllocDefault));
    CUDA_CHECK(cudaHostAlloc((void **)&w->h_cnt, sizeof *w->h_cnt, cudaHostAllocDefault));
    CUDA_CHECK(cudaMemsetAsync(w->d_hist, 0, CU_RADIX_BINS * sizeof(uint32_t), w->stream));
    CUDA_CHECK(cudaStreamSynchronize(w->stream));
    return CHIMERA_OK;
}

static chimera_status cu_upload(void *vctx, const be_resident *r, const be_config *cfg,
                                chimera_error *err)
{
    cu_ctx *c = (cu_ctx *)vctx;
    if (c->w || c->r.centroids)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: upload called twice");
    c->cfg = *cfg;
    if (c->cfg.n_workers < 1) c->cfg.n_workers = 1;
    if (cfg->max_m == 0 || cfg->max_m > QUANT_QTOK_MAX)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: max_m %u (1..%d)",
                       cfg->max_m, QUANT_QTOK_MAX);
    if (cfg->max_probe == 0 || cfg->max_probe > CU_MAX_PROBE)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: max_probe %u (1..%d)",
                       cfg->max_probe, CU_MAX_PROBE);
    if (cfg->max_refine == 0 || cfg->max_refine > (1u << 24))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: max_refine %u (1..2^24)",
                       cfg->max_refine);
    if (r->dim == 0 || r->dim_pad % 64 != 0 || r->dim_pad < r->dim || r->dim_pad > QUANT_DIM_MAX)
        return cm_fail(err, CHIMERA_ERR_DIM, "cuda backend: dim %u, dim_pad %u", r->dim, r->dim_pad);
    if (r->n_clusters == 0 || r->n_clusters >= (1u << 31))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: %u clusters (1..2^31-1)",
                       r->n_clusters);
    CM_TRY(check_segments(r, err));
    if (!r->rot) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: no rotation");
    // The pinned query buffers are sized by dim/dim_pad: a rotation of other dimensions
    // would write past them.
    if (r->rot->dim != r->dim || r->rot->dim_pad != r->dim_pad)
        return cm_fail(err, CHIMERA_ERR_DIM, "cuda backend: rotation for dim %u/%u, index %u/%u",
                       r->rot->dim, r->rot->dim_pad, r->dim, r->dim_pad);
    c->rot = r->rot;
    // what refresh compares: the shared fields only (the caller's segment array and
    // bitmap may not outlive this call's data version)
    c->src = *r;
    c->src.n_segments = 0;
    c->src.segments = nullptr;
    c->src.deleted = nullptr;

    CUDA_CHECK(cudaSetDevice(c->device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, c->device));
    if (prop.major < 8)
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "cuda backend: %s is sm_%d%d; the kernels need sm_80 or newer "
                       "(__reduce_max_sync)",
                       prop.name, prop.major, prop.minor);
    c->n_sm = prop.multiProcessorCount;
    c->smem_optin = prop.sharedMemPerBlockOptin;
    c->itopk_cap = CU_GRAPH_ITOPK_MAX;

    cu_resident *d = &c->r;
    d->dim = r->dim;
    d->dim_pad = r->dim_pad;
    d->code_bytes = qm_code1_bytes(r->dim_pad);
    d->n_clusters = r->n_clusters;
    d->degree = r->degree;
    d->n_entry = r->n_entry;
    d->n_docs = r->n_docs;
    d->n_tokens = r->n_tokens;
    CM_TRY(cu_refine_prepare(c, err));
    CM_TRY(cu_score1_prepare(c, err));
    CM_TRY(cu_centroid_prepare(c, err));
    if (cu_probe_brute_smem(cfg->max_probe) > 48u * 1024u)
        return cm_fail(err, CHIMERA_ERR_INTERNAL, "cuda backend: probe selection buffer too large");

    size_t need = resident_bytes(r) + (size_t)c->cfg.n_workers * worker_bytes(r, &c->cfg);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    size_t avail = cfg->device_memory_budget ? cfg->device_memory_budget
                   : free_b > CU_MEM_RESERVE ? free_b - CU_MEM_RESERVE
                                             : 0;
    if (need > avail)
        return cm_fail(err, CHIMERA_ERR_DEVICE,
                       "cuda backend: needs %zu bytes of device memory (%zu resident + %d x %zu "
                       "per worker), %zu available (%s; %zu free of %zu on %s)",
                       need, resident_bytes(r), c->cfg.n_workers, worker_bytes(r, &c->cfg),
                       avail, cfg->device_memory_budget ? "budget" : "free less reserve",
                       free_b, total_b, prop.name);

    size_t K = r->n_clusters, D = (size_t)r->n_docs;
    CM_TRY(dup(&d->centroids, r->centroids, K * r->dim, err));
    CM_TRY(dup(&d->graph_adj, r->graph_adj, K * r->degree, err));
    CM_TRY(dup(&d->graph_entry, r->graph_entry, (size_t)r->n_entry, err));
    CM_TRY(segs_reserve(d, r->n_segments, err));
    for (uint32_t i = 0; i < r->n_segments; i++) {
        CM_TRY(segment_upload(&r->segments[i], d->code_bytes, &d->segs[i], err));
        d->src_segs[i] = r->segments[i];
        d->n_segs = i + 1;
    }
    CM_TRY(dup(&d->d_segs, d->segs, d->n_segs, err));
    CM_TRY(dup(&d->deleted, r->deleted, (D + 7) / 8, err));

    c->w = (cu_worker *)cm_calloc((size_t)c->cfg.n_workers, sizeof *c->w);
    if (!c->w) return cm_fail(err, CHIMERA_ERR_NOMEM, "cuda backend: out of memory");
    for (int i = 0; i < c->cfg.n_workers; i++) {
        c->n_workers_init = i + 1;
        CM_TRY(worker_init(c, &c->w[i], err));
    }
    // Pageable cudaMemcpy may return before its last DMA lands, and the worker streams
    // are non-blocking (not ordered after the legacy stream): wait for every upload
    // before the first query can read the resident arrays.
    CUDA_CHECK(cudaDeviceSynchronize());
    c->ready = 1;
    return CHIMERA_OK;
}

// ---- refresh -------------------------------------------------------------------------

// By content identity (the key the index derives from the segment's section checksums),
// not by address: a refreshed view maps the same files at new addresses.
static int same_segment(const be_segment *a, const be_segment *b)
{
    return a->key == b->key && a->doc_base == b->doc_base && a->n_docs == b->n_docs &&
           a->n_tokens == b->n_tokens && a->n_lists == b->n_lists &&
           (a->post_cid == nullptr) == (b->post_cid == nullptr);
}

// Whether r extends what was uploaded; if not, why, as an INVALID_ARG the caller answers
// by making the engine anew.
static chimera_status check_extends(const cu_ctx *c, const be_resident *r, chimera_error *err)
{
    const be_resident *o = &c->src;
    const cu_resident *d = &c->r;
    if (r->dim != o->dim || r->dim_pad != o->dim_pad || r->n_clusters != o->n_clusters ||
        r->degree != o->degree || r->n_entry != o->n_entry || r->shared_key != o->shared_key ||
        !r->rot || memcmp(r->rot, o->rot, sizeof *r->rot) != 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "cuda backend: refresh: the centroids, graph or rotation changed; the "
                       "engine must be made anew");
    if (r->n_segments < d->n_segs || (r->n_segments > 0 && !r->segments))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "cuda backend: refresh: %u segments, %u uploaded; the engine must be "
                       "made anew", r->n_segments, d->n_segs);
    for (uint32_t i = 0; i < d->n_segs; i++)
        if (!same_segment(&r->segments[i], &d->src_segs[i]))
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "cuda backend: refresh: segment %u differs from the uploaded one; "
                           "the engine must be made anew", i);
    return check_segments(r, err);
}

// The device memory a refresh adds: new segments, the new descriptor array and bitmap
// (the old ones are freed only at the commit), and, when the document count grows, every
// worker's larger scratch; each worker's old scratch is freed right after its new one is
// made, so one old scratch is held at the peak as well. *steady: the total afterwards.
static size_t refresh_bytes(const cu_ctx *c, const be_resident *r, size_t *steady)
{
    const cu_resident *d = &c->r;
    int nw = c->cfg.n_workers;
    size_t add = index_bytes(r->n_segments, r->n_docs), old_scratch = 0, grow = 0;
    for (uint32_t i = d->n_segs; i < r->n_segments; i++)
        add += segment_bytes(&r->segments[i], r->dim_pad);
    for (int i = 0; i < nw; i++)
        if (c->w[i].doc_cap < (size_t)r->n_docs) {
            size_t o = doc_scratch_bytes(c->w[i].doc_cap, c->cfg.max_m);
            grow += doc_scratch_bytes((size_t)r->n_docs, c->cfg.max_m) - o;
            if (o > old_scratch) old_scratch = o;
        }
    *steady = resident_bytes(r) + (size_t)nw * worker_bytes(r, &c->cfg);
    return add + grow + old_scratch;
}

// Replaces the worker's per-document scratch by one for D documents. A larger table
// serves fewer documents as well, so this stands on its own: a refresh that fails later
// leaves the worker correct for the index as it was.
static chimera_status worker_grow(const cu_ctx *c, cu_worker *w, size_t D, chimera_error *err)
{
    doc_scratch ds;
    chimera_status s = doc_scratch_new(c, w, D, &ds, err);
    if (s != CHIMERA_OK) {
        doc_scratch_free(&ds);
        return s;
    }
    // The old scratch is idle (refresh synchronised the device first), and the new one's
    // initialisation is on the worker's stream, ahead of its next query.
    doc_scratch old = {w->d_M, w->d_flag, w->d_touched, w->d_cand};
    doc_scratch_free(&old);
    doc_scratch_set(w, &ds, D);
    w->table_dirty = 0; // the new table starts clean, whatever the old one held
    return CHIMERA_OK;
}

// Uploads the segments past the committed ones into their slots and a new descriptor
// array and bitmap into *d_segs, *deleted; the caller frees all of it on failure.
static chimera_status refresh_stage(cu_ctx *c, const be_resident *r, cu_segment **d_segs,
                                    uint8_t **deleted, chimera_error *err)
{
    cu_resident *d = &c->r;
    for (uint32_t i = d->n_segs; i < r->n_segments; i++)
        CM_TRY(segment_upload(&r->segments[i], d->code_bytes, &d->segs[i], err));
    CM_TRY(dup(d_segs, d->segs, r->n_segments, err));
    CM_TRY(dup(deleted, r->deleted, ((size_t)r->n_docs + 7) / 8, err));
    // As at upload: the pageable copies must have landed before a non-blocking worker
    // stream reads them.
    CUDA_CHECK(cudaDeviceSynchronize());
    return CHIMERA_OK;
}

static chimera_status cu_refresh(void *vctx, const be_resident *r, chimera_error *err)
{
    cu_ctx *c = (cu_ctx *)vctx;
    cu_resident *d = &c->r;
    if (!c->ready)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: refresh before upload");
    CM_TRY(check_extends(c, r, err));

    size_t steady = 0, add = refresh_bytes(c, r, &steady);
    CUDA_CHECK(cudaSetDevice(c->device));
    if (c->cfg.device_memory_budget) {
        if (steady > c->cfg.device_memory_budget)
            return cm_fail(err, CHIMERA_ERR_DEVICE,
                           "cuda backend: refresh needs %zu bytes of device memory, the budget "
                           "is %zu",
                           steady, c->cfg.device_memory_budget);
    } else {
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        size_t avail = free_b > CU_MEM_RESERVE ? free_b - CU_MEM_RESERVE : 0;
        if (add > avail)
            return cm_fail(err, CHIMERA_ERR_DEVICE,
                           "cuda backend: refresh needs %zu more bytes of device memory, %zu "
                           "available (free less reserve; %zu free of %zu)",
                           add, avail, free_b, total_b);
    }

    // No query runs during the call, but one may have left work queued (query_begin does
    // not wait): nothing may still read what is replaced.
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < c->cfg.n_workers; i++)
        if (c->w[i].doc_cap < (size_t)r->n_docs)
            CM_TRY(worker_grow(c, &c->w[i], (size_t)r->n_docs, err));

    CM_TRY(segs_reserve(d, r->n_segments, err));
    cu_segment *d_segs = nullptr;
    uint8_t *deleted = nullptr;
    chimera_status s = refresh_stage(c, r, &d_segs, &deleted, err);
    if (s != CHIMERA_OK) {
        for (uint32_t i = d->n_segs; i < r->n_segments; i++) segment_free(&d->segs[i]);
        dfree(d_segs);
        dfree(deleted);
        return s;
    }
    // Commit: from here on the kernels see the new segments and bitmap, and the host side
    // uses the caller's new view (the old one's mapping may be released after this call).
    for (uint32_t i = 0; i < r->n_segments; i++) d->src_segs[i] = r->segments[i];
    c->rot = r->rot;
    c->src = *r;
    c->src.n_segments = 0;
    c->src.segments = nullptr;
    c->src.deleted = nullptr;
    dfree(d->d_segs);
    dfree(d->deleted);
    d->d_segs = d_segs;
    d->deleted = deleted;
    d->n_segs = r->n_segments;
    d->n_docs = r->n_docs;
    d->n_tokens = r->n_tokens;
    return CHIMERA_OK;
}

// ---- per-query stages ------------------------------------------------------------------

static chimera_status get_worker(cu_ctx *c, int worker, cu_worker **w, chimera_error *err)
{
    if (!c->ready || worker < 0 || worker >= c->cfg.n_workers)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: worker %d (of %d%s)", worker,
                       c->cfg.n_workers, c->ready ? "" : ", nothing uploaded");
    *w = &c->w[worker];
    CUDA_CHECK(cudaSetDevice(c->device));
    return CHIMERA_OK;
}

static chimera_status stage_start(cu_worker *w, int s, chimera_error *err)
{
    CUDA_CHECK(cudaEventRecord(w->ev[s][0], w->stream));
    return CHIMERA_OK;
}

static chimera_status stage_end(cu_worker *w, int s, chimera_error *err)
{
    CUDA_CHECK(cudaEventRecord(w->ev[s][1], w->stream));
    w->stage_pending[s] = 1;
    w->stage_calls[s]++;
    return CHIMERA_OK;
}

// After a stream synchronisation: every recorded stage is complete; add its time.
static chimera_status stages_collect(cu_worker *w, chimera_error *err)
{
    for (int s = 0; s < CU_N_STAGES; s++)
        if (w->stage_pending[s]) {
            float ms = 0.0f;
            CUDA_CHECK(cudaEventElapsedTime(&ms, w->ev[s][0], w->ev[s][1]));
            w->stage_ms[s] += ms;
            w->stage_pending[s] = 0;
        }
    return CHIMERA_OK;
}

static chimera_status sync_worker(cu_worker *w, chimera_error *err)
{
    if (w->ev_sync) { // an event of cudaEventBlockingSync: the thread sleeps
        CUDA_CHECK(cudaEventRecord(w->ev_sync, w->stream));
        CUDA_CHECK(cudaEventSynchronize(w->ev_sync));
    } else {
        CUDA_CHECK(cudaStreamSynchronize(w->stream));
    }
    return stages_collect(w, err);
}

static chimera_status cu_query_begin(void *vctx, int worker, const float *q, uint32_t m,
                                     chimera_error *err)
{
    cu_ctx *c = (cu_ctx *)vctx;
    cu_worker *w = NULL;
    CM_TRY(get_worker(c, worker, &w, err));
    if (m == 0 || m > c->cfg.max_m)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: query of %u tokens (max %u)",
                       m, c->cfg.max_m);
    uint32_t dim = c->r.dim, dp = c->r.dim_pad;
    // The pinned buffer may still feed the previous query's copies.
    CUDA_CHECK(cudaEventSynchronize(w->ev_up));
    float *hq = w->h_q, *hrot = w->h_q + (size_t)c->cfg.max_m * dim;
    memcpy(hq, q, (size_t)m * dim * sizeof(float));
    for (uint32_t j = 0; j < m; j++) quant_rotate(c->rot, q + (size_t)j * dim, hrot + (size_t)j * dp);
    w->m = m;
    w->n_probe = 0;
    CM_TRY(stage_start(w, CU_ST_BEGIN, err));
    CUDA_CHECK(cudaMemcpyAsync(w->d_q, hq, (size_t)m * dim * sizeof(float),
                               cudaMemcpyHostToDevice, w->stream));
    CUDA_CHECK(cudaMemcpyAsync(w->d_qrot, hrot, (size_t)m * dp * sizeof(float),
                               cudaMemcpyHostToDevice, w->stream));
    CUDA_CHECK(cudaEventRecord(w->ev_up, w->stream));
    w->bytes_up += (uint64_t)m * (dim + dp) * sizeof(float);
    if (c->poison) {
        CUDA_CHECK(cudaMemsetAsync(w->d_lut, 0xff, (size_t)m * dp * 16, w->stream));
        CUDA_CHECK(cudaMemsetAsync(w->d_S_km, 0xff, (size_t)c->r.n_clusters * m * 4, w->stream));
    }
    CM_TRY(cu_lut_build(c, w, err));
    CM_TRY(cu_centroid_km(c, w, err));
    CM_TRY(stage_end(w, CU_ST_BEGIN, err));
    return CHIMERA_OK;
}

static chimera_status cu_probe(void *vctx, int worker, uint32_t n_probe, uint32_t k_refine,
                               be_probe_mode mode, uint32_t *cids, float *qc, chimera_error *err)
{
    (void)k_refine; /* probe=auto here goes by the index's size alone */
    cu_ctx *c = (cu_ctx *)vctx;
    cu_worker *w = NULL;
    CM_TRY(get_worker(c, worker, &w, err));
    if (w->m == 0) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: probe before query_begin");
    if (n_probe == 0 || n_probe > c->cfg.max_probe)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: n_probe %u (max %u)", n_probe,
                       c->cfg.max_probe);
    if (n_probe > c->r.n_clusters) n_probe = c->r.n_clusters;
    int graph = 0;
    if (mode == BE_PROBE_GRAPH) graph = cu_graph_usable(c, n_probe);
    else if (mode == BE_PROBE_AUTO)
        graph = c->r.n_clusters >= CU_GRAPH_MIN_K && cu_graph_usable(c, n_probe);
    uint32_t m = w->m;
    size_t np = (size_t)m * n_probe;
    CM_TRY(stage_start(w, CU_ST_PROBE, err));
    if (c->poison) {
        CUDA_CHECK(cudaMemsetAsync(w->d_probe_cid, 0xff, np * 4, w->stream));
        CUDA_CHECK(cudaMemsetAsync(w->d_probe_qc, 0xff, np * 4, w->stream));
    }
    if (graph) {
        CM_TRY(cu_probe_graph(c, w, n_probe, err));
        w->walked += np;
    } else {
        CM_TRY(cu_probe_brute(c, w, n_probe, err));
    }
    CM_TRY(stage_end(w, CU_ST_PROBE, err));
    w->n_probe = n_probe;
    if (!cids && !qc) return CHIMERA_OK;
    CUDA_CHECK(cudaMemcpyAsync(w->h_ids, w->d_probe_cid, np * 4, cudaMemcpyDeviceToHost, w->stream));
    CUDA_CHECK(cudaMemcpyAsync(w->h_scores, w->d_probe_qc, np * 4, cudaMemcpyDeviceToHost, w->stream));
    w->bytes_down += np * 8;
    CM_TRY(sync_worker(w, err));
    if (cids) memcpy(cids, w->h_ids, np * sizeof *cids);
    if (qc) memcpy(qc, w->h_scores, np * sizeof *qc);
    return CHIMERA_OK;
}

static chimera_status cu_refine(void *vctx, int worker, uint32_t k_refine, be_floor imp,
                                const uint8_t *allow, uint32_t *docs, float *partial,
                                uint32_t *n_out, be_refine_stats *stats, chimera_error *err)
{
    cu_ctx *c = (cu_ctx *)vctx;
    cu_worker *w = NULL;
    CM_TRY(get_worker(c, worker, &w, err));
    // A filter's bitmap goes up with the query (ceil(D/8) bytes), into a per-worker buffer
    // grown on demand, so unfiltered searches never pay for it.
    w->allow_on = allow != NULL;
    if (allow) {
        size_t nb = ((size_t)c->r.n_docs + 7) / 8;
        if (w->allow_cap < nb) {
            dfree(w->d_allow);
            w->d_allow = nullptr;
            w->allow_cap = 0;
            CUDA_CHECK(cudaMalloc((void **)&w->d_allow, nb));
            w->allow_cap = nb;
        }
        CUDA_CHECK(cudaMemcpyAsync(w->d_allow, allow, nb, cudaMemcpyHostToDevice, w->stream));
        w->bytes_up += nb;
    }
    if (k_refine == 0 || k_refine > c->cfg.max_refine)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: k_refine %u (max %u)",
                       k_refine, c->cfg.max_refine);
    if (w->m == 0 || w->n_probe == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: refine before probe");
    CM_TRY(stage_start(w, CU_ST_REFINE, err));
    CM_TRY(cu_refine_run(c, w, k_refine, imp, err));
    CM_TRY(stage_end(w, CU_ST_REFINE, err));
    CUDA_CHECK(cudaMemcpyAsync(w->h_ids, w->d_out_ids, (size_t)k_refine * 4,
                               cudaMemcpyDeviceToHost, w->stream));
    CUDA_CHECK(cudaMemcpyAsync(w->h_scores, w->d_out_scores, (size_t)k_refine * 4,
                               cudaMemcpyDeviceToHost, w->stream));
    CUDA_CHECK(cudaMemcpyAsync(w->h_cnt, w->d_cnt, sizeof *w->h_cnt, cudaMemcpyDeviceToHost,
                               w->stream));
    w->bytes_down += (uint64_t)k_refine * 8 + sizeof *w->h_cnt;
    CM_TRY(sync_worker(w, err));
    uint32_t n = w->h_cnt->n_out;
    if (n > k_refine)
        return cm_fail(err, CHIMERA_ERR_INTERNAL, "cuda backend: refine selected %u of %u", n,
                       k_refine);
    memcpy(docs, w->h_ids, (size_t)n * sizeof *docs);
    if (partial) memcpy(partial, w->h_scores, (size_t)n * sizeof *partial);
    *n_out = n;
    if (stats) {
        stats->tokens_scored = w->h_cnt->tokens_scored;
        stats->docs_touched = w->h_cnt->n_touched;
    }
    return CHIMERA_OK;
}

static chimera_status cu_score1(void *vctx, int worker, const uint32_t *docs, uint32_t n,
                                float *scores, chimera_error *err)
{
    cu_ctx *c = (cu_ctx *)vctx;
    cu_worker *w = NULL;
    CM_TRY(get_worker(c, worker, &w, err));
    if (n == 0) return CHIMERA_OK;
    if (w->m == 0) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: score1 before query_begin");
    if (n > c->cfg.max_refine)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: score1 of %u documents (max %u)",
                       n, c->cfg.max_refine);
    for (uint32_t i = 0; i < n; i++)
        if ((int64_t)docs[i] >= c->r.n_docs)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: document %u of %lld",
                           docs[i], (long long)c->r.n_docs);
    memcpy(w->h_ids, docs, (size_t)n * sizeof *docs);
    CM_TRY(stage_start(w, CU_ST_SCORE1, err));
    CUDA_CHECK(cudaMemcpyAsync(w->d_out_ids, w->h_ids, (size_t)n * 4, cudaMemcpyHostToDevice,
                               w->stream));
    if (c->poison) CUDA_CHECK(cudaMemsetAsync(w->d_out_scores, 0xff, (size_t)n * 4, w->stream));
    CM_TRY(cu_score1_run(c, w, n, err));
    CUDA_CHECK(cudaMemcpyAsync(w->h_scores, w->d_out_scores, (size_t)n * 4,
                               cudaMemcpyDeviceToHost, w->stream));
    CM_TRY(stage_end(w, CU_ST_SCORE1, err));
    w->bytes_up += (uint64_t)n * 4;
    w->bytes_down += (uint64_t)n * 4;
    CM_TRY(sync_worker(w, err));
    memcpy(scores, w->h_scores, (size_t)n * sizeof *scores);
    return CHIMERA_OK;
}

static chimera_status cu_score_ci(void *vctx, int worker, const uint32_t *docs, uint32_t n,
                                  float *scores, chimera_error *err)
{
    cu_ctx *c = (cu_ctx *)vctx;
    cu_worker *w = NULL;
    CM_TRY(get_worker(c, worker, &w, err));
    if (n == 0) return CHIMERA_OK;
    if (w->m == 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: score_ci before query_begin");
    if (n > c->cfg.max_refine)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "cuda backend: score_ci of %u documents (max %u)", n, c->cfg.max_refine);
    for (uint32_t i = 0; i < n; i++)
        if ((int64_t)docs[i] >= c->r.n_docs)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "cuda backend: document %u of %lld",
                           docs[i], (long long)c->r.n_docs);
    memcpy(w->h_ids, docs, (size_t)n * sizeof *docs);
    CM_TRY(stage_start(w, CU_ST_CI, err));
    CUDA_CHECK(cudaMemcpyAsync(w->d_out_ids, w->h_ids, (size_t)n * 4, cudaMemcpyHostToDevice,
                               w->stream));
    if (c->poison) CUDA_CHECK(cudaMemsetAsync(w->d_out_scores, 0xff, (size_t)n * 4, w->stream));
    CM_TRY(cu_score_ci_run(c, w, n, err));
    CUDA_CHECK(cudaMemcpyAsync(w->h_scores, w->d_out_scores, (size_t)n * 4,
                               cudaMemcpyDeviceToHost, w->stream));
    CM_TRY(stage_end(w, CU_ST_CI, err));
    w->bytes_up += (uint64_t)n * 4;
    w->bytes_down += (uint64_t)n * 4;
    CM_TRY(sync_worker(w, err));
    memcpy(scores, w->h_scores, (size_t)n * sizeof *scores);
    return CHIMERA_OK;
}

static uint64_t cu_probes_walked(void *vctx, int worker)
{
    cu_ctx *c = (cu_ctx *)vctx;
    return c->ready && worker >= 0 && worker < c->cfg.n_workers ? c->w[worker].walked : 0;
}

// In declaration order (backend.h): C++17 has no designated initialisers.
static const struct cm_backend_i cu_iface = {
    BE_API_VERSION, cu_upload, cu_query_begin, cu_probe, cu_refine, cu_score1,
    nullptr, // host_centroid_scores: S stays on the device
    cu_release,
    cu_refresh,
    cu_score_ci,
    nullptr, // rows_computed: S is computed in full on the device
    cu_probes_walked,
};

extern "C" chimera_status cuda_backend_new(cm_backend *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return cm_fail(err, CHIMERA_ERR_DEVICE, "cuda backend: no usable device (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device present");
    }
    cu_ctx *c = (cu_ctx *)cm_calloc(1, sizeof *c);
    if (!c) return cm_fail(err, CHIMERA_ERR_NOMEM, "cuda backend: out of memory");
    const char *poison = getenv("CHIMERA_CUDA_POISON");
    c->poison = poison && *poison && strcmp(poison, "0") != 0;
    const char *sync = getenv("CHIMERA_CUDA_SYNC");
    c->blocking_sync = sync && strcmp(sync, "block") == 0;
    c->device = 0;
    out->iface = &cu_iface;
    out->ctx = c;
    out->name = "cuda";
    return CHIMERA_OK;
}
