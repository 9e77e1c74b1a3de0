/* The device interface used by search/, and the registry of compiled-in backends.
 *
 * A backend holds the index's resident data (centroids, graph, posting lists, 1-bit
 * planes and factors: docs/design.md §2.1) and runs the device stages of a query:
 *
 *   query_begin   take the m query tokens (the only upload per query), rotate them,
 *                 build the tables, compute the centroid scores S[c][j] = <c, q_j>
 *   probe         the n_probe best centroids of every query token
 *   refine        candidate refinement: 1-bit estimates over the probed posting lists,
 *                 max per (document, query token), imputed floor for tokens that saw
 *                 none of a document, partial sums, the top k_refine documents
 *   score_ci      the centroid-interaction score of documents: each token's estimate
 *                 replaced by its centroid's score, no code read (PLAID), to rank
 *                 refinement's candidates before score1
 *   score1        the complete 1-bit Chamfer score of a chunk of documents
 *
 * Every per-query call names a `worker` in [0, n_workers): each worker owns its scratch
 * (and, on a GPU, its stream), so workers run queries concurrently; calls of one worker
 * are sequential. Only ids and scores come back. search/ knows nothing else about a
 * backend, and the CPU backend (cpu/) is the reference the CUDA backend (cuda/) must
 * match: integer-exact where the arithmetic is integer, within a stated tolerance
 * elsewhere.
 *
 * backend.c is the only file that knows whether CUDA was compiled in. */
#ifndef CHIMERA_BACKEND_BACKEND_H
#define CHIMERA_BACKEND_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "core/bsearch.h"
#include "quant/quant_math.h"
#include "quant/rotation.h"

#define BE_API_VERSION 5

/* One segment of the index (index/index.h: ix_segment): documents doc_base ..
 * doc_base + n_docs - 1 and their tokens. Numbers inside are local to the segment
 * (post_doc, doc_off); the backend adds doc_base to report global documents. */
typedef struct be_segment {
    uint64_t key;                 /* identity of its content (index/index.h: ix_segment.key):
                                     equal keys, equal arrays, whatever their address */
    int64_t doc_base, n_docs, n_tokens;
    uint32_t n_lists;             /* n_clusters, or the length of post_cid */
    const uint32_t *post_cid;     /* [n_lists] cluster of each list, increasing; NULL:
                                     list l is cluster l */
    const int64_t *post_off;      /* [n_lists + 1] */
    const uint32_t *post_doc;     /* [N] local document of each posting position */
    const uint8_t *c1_codes;      /* [N, dim_pad/8] cluster-major */
    const quant_f1 *c1_fact;
    const uint8_t *d1_codes;      /* [N, dim_pad/8] doc-major */
    const quant_f1 *d1_fact;
    const uint32_t *tok_cid;      /* [N] global centroid ids */
    const int64_t *doc_off;       /* [D + 1] local token offsets */
} be_segment;

/* Everything a device keeps for the life of an index: plain pointers into the mapped
 * index (layout: index/index.h), uploaded as they are. A built index is one segment;
 * every `chimera add` appends one (docs/format.md, "Segments"). */
typedef struct be_resident {
    uint64_t shared_key;          /* identity of the rotation, centroids and graph */
    uint32_t dim, dim_pad, n_clusters, degree, n_entry;
    int64_t n_docs, n_tokens;     /* over all segments */
    const quant_rotation *rot;
    const float *centroids;       /* [K, dim] */
    const uint32_t *graph_adj;    /* [K, degree] */
    const uint32_t *graph_entry;  /* [n_entry] */
    uint32_t n_segments;
    const be_segment *segments;   /* by increasing doc_base */
    const uint8_t *deleted;       /* [ceil(n_docs/8)] over all segments */
} be_resident;

/* The segment of global document d. */
static inline const be_segment *be_doc_segment(const be_resident *r, int64_t d)
{
    uint32_t lo = 0, hi = r->n_segments - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (r->segments[mid].doc_base <= d) lo = mid;
        else hi = mid - 1;
    }
    return &r->segments[lo];
}

/* Posting list of cluster cid in segment sg: positions [*p0, *p0 + *n). */
static inline void be_segment_list(const be_segment *sg, uint32_t cid, int64_t *p0, int64_t *n)
{
    uint32_t l = sg->post_cid ? cm_find_u32(sg->post_cid, sg->n_lists, cid) : cid;
    *p0 = 0;
    *n = 0;
    if (l >= sg->n_lists) return;
    *p0 = sg->post_off[l];
    *n = sg->post_off[l + 1] - *p0;
}

typedef enum be_impute {
    BE_IMPUTE_PROBE_FLOOR = 0, /* the n_probe-th centroid score of the query token: a
                                  proxy for what an unprobed token can score (default) */
    BE_IMPUTE_ZERO = 1,        /* 0, as a plain partial sum would */
    BE_IMPUTE_MIN_SEEN = 2,    /* the smallest estimate seen for that query token */
} be_impute;

/* Refinement's floor: the kind, and for BE_IMPUTE_PROBE_FLOOR a scale in (0, 1]. */
typedef struct be_floor {
    be_impute impute;
    float scale;
} be_floor;

#ifdef __CUDACC__
#define BE_HOST_DEVICE __host__ __device__
#else
#define BE_HOST_DEVICE
#endif

/* The probe floor of a query token whose n_probe-th centroid score is qc: qc moved
 * toward zero by (1 - scale) |qc|, never above qc. An unprobed document token lies in a
 * cluster scoring below qc, and its own score is below its centroid's by its offset
 * from it, so qc itself overstates it by how fast centroid scores fall past the probed
 * ones (bench/RESULTS.md section 5.12: the best scale is 0.55-0.85 by corpus, which the
 * build calibrates). A non-finite qc (padding of a probe that found fewer) stays. */
static inline BE_HOST_DEVICE float be_probe_floor(float qc, float scale)
{
    if (scale == 1.0f || !(qc > -INFINITY && qc < INFINITY)) return qc;
    return qc - (1.0f - scale) * (qc < 0.0f ? -qc : qc);
}

typedef enum be_probe_mode {
    BE_PROBE_AUTO = 0,  /* backend's choice (the CPU: brute force over S, or the graph
                           from K = 24,576 when the query's refined documents' tokens
                           are a fraction of S's rows (bench/RESULTS.md sections 5.8,
                           5.25, 5.26);
                           a GPU: the graph above a size) */
    BE_PROBE_BRUTE = 1, /* top n_probe of the exact centroid scores */
    BE_PROBE_GRAPH = 2, /* the proximity graph */
} be_probe_mode;

typedef struct be_config {
    int n_workers;        /* concurrent query workers */
    int n_threads;        /* threads a backend may use inside one call (CPU) */
    uint32_t max_m;       /* largest query */
    uint32_t max_probe;   /* largest n_probe */
    uint32_t max_refine;  /* largest k_refine */
    uint32_t graph_list;  /* the CPU graph probe's candidate list (0: its own rule) */
    uint32_t graph_auto_k; /* centroids from which the CPU's probe=auto may walk the graph
                              (0: its own threshold, CPU_GRAPH_AUTO_K; tests lower it) */
    size_t device_memory_budget; /* bytes (0: the device's free memory) */
} be_config;

/* What refine reports for --profile. */
typedef struct be_refine_stats {
    uint64_t tokens_scored;   /* posting entries estimated */
    uint64_t docs_touched;    /* distinct documents seen */
} be_refine_stats;

struct cm_backend_i {
    int api_version; /* BE_API_VERSION */
    /* Uploads the resident data once. The pointers stay valid until free. */
    chimera_status (*upload)(void *ctx, const be_resident *r, const be_config *cfg,
                             chimera_error *err);
    /* q: m x dim query tokens (host memory). */
    chimera_status (*query_begin)(void *ctx, int worker, const float *q, uint32_t m,
                                  chimera_error *err);
    /* cids/qc: [m x n_probe] centroid ids and scores, best first per token; a token
     * with fewer than n_probe centroids found (a graph search that reached fewer, or
     * scores not above -inf) has the rest padded with UINT32_MAX and -inf. k_refine:
     * the documents the refine that follows keeps (0: unknown, taken as max_refine);
     * BE_PROBE_AUTO may choose by it, per query, so that one engine serving shallow and
     * deep searches probes each as a search of its own depth would. */
    chimera_status (*probe)(void *ctx, int worker, uint32_t n_probe, uint32_t k_refine,
                            be_probe_mode mode, uint32_t *cids, float *qc, chimera_error *err);
    /* Uses the probes of the last probe call. docs/partial: [k_refine], best first
     * (ties: smaller document), *n_out filled (fewer when fewer documents were seen).
     * Deleted documents never appear, nor, when `allow` (a bitmap over the n_docs
     * documents, host memory, valid during the call) is given, those whose bit is
     * clear: a search filter applied inside refinement, so disallowed documents never
     * take a place among the k_refine. */
    chimera_status (*refine)(void *ctx, int worker, uint32_t k_refine, be_floor floor,
                             const uint8_t *allow, uint32_t *docs, float *partial,
                             uint32_t *n_out, be_refine_stats *stats, chimera_error *err);
    /* scores[i] = 1-bit Chamfer estimate of docs[i] over all its tokens. */
    chimera_status (*score1)(void *ctx, int worker, const uint32_t *docs, uint32_t n,
                             float *scores, chimera_error *err);
    /* (optional; default NULL) The host-memory centroid scores S [K x m] of the
     * worker's current query, when the backend computed them on the host anyway (the
     * CPU backend); search/ then reuses them for full-bit scoring. After a graph probe
     * only the rows of centroids that refined documents' tokens use are computed (the
     * rows full-bit scoring reads); the others are undefined. */
    const float *(*host_centroid_scores)(void *ctx, int worker);
    void (*release)(void *ctx);
    /* (optional; default NULL) The index changed (index/update.c: documents appended as
     * new segments, deletions): r extends the uploaded one (the same shared data and the
     * same segments first, by key, maybe more, and a new deletion bitmap); its pointers
     * may differ (a new mapping of the same files) and replace the old ones. A backend
     * that can, takes only what is new (a GPU: the new segments and the bitmap) and
     * returns CHIMERA_OK; anything else (r does not extend it) means the engine is made
     * anew. No query runs during the call. */
    chimera_status (*refresh)(void *ctx, const be_resident *r, chimera_error *err);
    /* scores[i] = sum_j max over the tokens t of docs[i] of S[cid_t][j], the query's
     * centroid scores standing for its tokens' estimates (-inf for an empty document);
     * n at most max_refine. After a refine of the same query; a CPU backend computes the
     * rows of S a graph probe left out, as for score1. */
    chimera_status (*score_ci)(void *ctx, int worker, const uint32_t *docs, uint32_t n,
                               float *scores, chimera_error *err);
    /* (optional; default NULL) Rows of S the worker has computed one by one for the
     * documents it scored (after a graph probe), a running count since upload, K for
     * each switch from such rows to the full S: the search reads it around each query
     * for its profile (a full S computed at the probe is not counted). */
    uint64_t (*rows_computed)(void *ctx, int worker);
    /* (optional; default NULL) Probes (query tokens x n_probe) the worker's graph walks
     * returned, a running count since upload: the search reads it around each query for
     * its profile (chimera_search_profile.n_walked). */
    uint64_t (*probes_walked)(void *ctx, int worker);
};

typedef struct cm_backend {
    const struct cm_backend_i *iface;
    void *ctx;
    const char *name; /* "cpu", "cuda", "cpu-as-device" */
} cm_backend;

/* Creates a backend by name ("cpu", "cuda", or "auto": cuda when compiled in and a
 * device is usable, else cpu; "cpu-as-device" for tests: cpu_backend.h). @return
 * CHIMERA_OK, _UNSUPPORTED (cuda not compiled), _DEVICE (no usable device), _NOMEM. */
chimera_status backend_new(const char *name, cm_backend *out, chimera_error *err);
void backend_free(cm_backend *b);

/* 1 when the CUDA backend was built into this library. */
int backend_cuda_compiled(void);

/* Number of usable CUDA devices; writes a one-line description into status (the
 * first device's name, or why none is usable: not compiled, no driver, no device). */
int backend_cuda_device_count(char *status, size_t cap);

#endif
