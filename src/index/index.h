/* A Chimera index: what the build writes and what search reads.
 *
 * Sections: the list in index/sections.h (name, element type, shape, device or host
 * residency), written in that order; all arrays little-endian, payloads 64-byte
 * aligned in the mapping. docs/format.md describes each.
 *
 * The manifest's "meta" holds dims, counts, the build parameters, posting-list
 * statistics and per-phase build times (see build.c). */
#ifndef CHIMERA_INDEX_INDEX_H
#define CHIMERA_INDEX_INDEX_H

#include <stdint.h>

#include "chimera.h"
#include "core/bsearch.h"
#include "data/corpus.h"
#include "graph/graph.h"
#include "index/sections.h"
#include "quant/rabitq.h"

/* The container (index/store.h) stays private to src/index/: its manifest is cJSON, which
 * no other module sees. */
typedef struct store store;

#define IX_MAX_PHASES 8

/* Calibrated default search parameters (index/defaults.h reads and writes them). */
#define IX_MAX_DEFAULTS CHIMERA_MAX_CALIBRATED

typedef struct ix_default {
    uint32_t k;
    chimera_search_params params;
    double recall, recall_low; /* held-out mean and the lower bound of its 95% interval */
    int reached;               /* recall_low >= target */
} ix_default;

typedef struct ix_defaults {
    int n;                     /* 0: none */
    ix_default d[IX_MAX_DEFAULTS]; /* by increasing k */
    double target;
    int64_t n_queries;         /* pseudo-queries measured (tuning + held out) */
    double seconds;
} ix_defaults;


typedef struct ix_build_opts {
    uint32_t bits;          /* 0: 4 */
    uint32_t n_clusters;    /* 0: auto (see ix_auto_clusters) */
    uint32_t graph_degree;  /* 0: 32 */
    int n_threads;          /* 0: all CPUs */
    uint64_t seed;
    int no_sync;            /* skip fsyncs (tests, scratch indexes) */
    chimera_progress_fn progress;
    void *progress_user;
    chimera_cancel_fn cancel; /* optional: non-zero stops the build (CHIMERA_ERR_CANCELLED) */
    void *cancel_user;
    int check_generation;     /* commit only if the index at out_dir is still at
                                 expect_generation (CHIMERA_ERR_CONFLICT otherwise) */
    uint64_t expect_generation;
    const char *carry_meta;   /* a metadata database (index/metadata.h) to copy into the
                                 new index (a recluster keeps its metadata); NULL: none */
    int rerank;               /* a chimera_rerank: store the vectors (vectors_*) as this */
    /* Calibration of the default search parameters (index/defaults.h): called once the
     * sections are written, before the commit, on the written (openable, uncommitted)
     * index and the corpus it was built from; what it measures is committed with it.
     * NULL: none. */
    chimera_status (*calibrate)(void *user, const data_corpus *c, const char *dir,
                                ix_defaults *out, chimera_error *err);
    void *calibrate_user;
    /* the files the corpus was read from, recorded as the index's source (defaults.h);
     * NULL: none (a corpus in memory) */
    const char *source_tokens, *source_doclens, *source_ids;
    /* the centroids and seed to use instead of training (index/codebook.h); NULL: train */
    const struct ix_codebook *codebook;
} ix_build_opts;

typedef struct ix_build_report {
    int n_phases;
    const char *phase[IX_MAX_PHASES];
    double seconds[IX_MAX_PHASES];
    double total_seconds;
    uint64_t peak_rss;
    uint32_t n_clusters;
    double assign_recall;   /* fraction of tokens given their true nearest centroid */
    double assign_sim_p10;  /* 10th percentile of a token's similarity to its centroid */
    uint64_t bytes_written;
    ix_defaults defaults;    /* what the calibration stored (n = 0: none) */
} ix_build_report;

/* The number of clusters the build picks for n_tokens: one per ~100 tokens (the fine
 * granularity the paper relies on: small residuals make 1-bit filtering selective),
 * rounded to a multiple of 64 from 64 clusters up, at least 1 and at most n_tokens / 4. */
uint32_t ix_auto_clusters(int64_t n_tokens);

chimera_status ix_build(const data_corpus *c, const char *out_dir, const ix_build_opts *opts,
                        ix_build_report *report, chimera_error *err);

/* One segment: a run of consecutive documents with everything that is per document
 * or per token (sections.h: IX_SEGMENT). A built or compacted index is one segment;
 * `chimera add` appends one per commit (docs/format.md, "Segments"). Within a segment
 * numbers are local: post_doc and post_tok count from its first document and token,
 * doc_off from 0; tok_cid holds global centroid ids. */
typedef struct ix_segment {
    int64_t doc_base, tok_base; /* global number of its first document and token */
    int64_t n_docs, n_tokens;
    uint32_t n_lists;           /* posting lists: n_clusters, or post_cid's length */
    const uint32_t *post_cid;   /* [n_lists] cluster of each list, increasing; NULL: list
                                   l is cluster l */
    const int64_t *post_off;    /* [n_lists + 1] */
    const uint32_t *post_tok, *post_doc;
    const uint8_t *c1_codes, *d1_codes, *dB_codes;
    const quant_f1 *c1_fact, *d1_fact;
    const quant_fB *dB_fact;
    const uint32_t *tok_cid;
    const int64_t *doc_off, *doc_ids;
    const uint32_t *id_order;   /* [n_docs] local documents by increasing id */
    const void *vectors;        /* [n_tokens x dim] the original vectors, in the index's
                                   element type (ix_index.vec_type); NULL: not stored */
    uint32_t *id_order_own;     /* id_order when open computed it (older indexes) */
    uint32_t seq;               /* 0 for the base; its sections' "s<seq>_" otherwise */
    uint64_t key;               /* identity of its content: a hash of its sections'
                                   checksums (a device keeps segments across a refresh by
                                   it) */
} ix_segment;

#define IX_MAX_SEGMENTS 64

/* An opened index: views into the mapped sections. */
typedef struct ix_index {
    store *st;
    uint32_t dim, dim_pad, bits, n_clusters, degree, n_entry;
    int64_t n_docs, n_tokens;    /* over all segments */
    quant_rotation rot;
    const float *centroids;
    graph g; /* adj and entry point into the mapping; never graph_free it */
    uint64_t shared_key;         /* identity of rotation, centroids and graph (as key) */
    uint32_t n_segs;
    ix_segment *segs;            /* [n_segs], by increasing doc_base */
    const uint8_t *deleted;      /* [ceil(n_docs/8)] over all segments */
    uint8_t *deleted_own;        /* deleted, when composed from the base bitmap and the
                                    tombstone lists */
    int64_t n_deleted; /* documents marked in `deleted` (counted at open) */
    int64_t max_doc_len;
    uint32_t n_tombstone_lists;
    int vec_type;       /* a chimera_rerank: the stored vectors' element type (the base
                           segment's); CHIMERA_RERANK_NONE: none */
    int vec_complete;   /* 1: every segment has them (what the exact re-rank needs); 0
                           with a vec_type: a segment written by an older library lacks
                           them (vec_missing_seq) */
    uint32_t vec_missing_seq;
} ix_index;

/* The segment holding global document `doc` (0 <= doc < n_docs). */
static inline const ix_segment *ix_doc_segment(const ix_index *ix, int64_t doc)
{
    uint32_t lo = 0, hi = ix->n_segs - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (ix->segs[mid].doc_base <= doc) lo = mid;
        else hi = mid - 1;
    }
    return &ix->segs[lo];
}

/* Fetches doc's doc_off entry into the cache. Finding a document's tokens is a random
 * read of its own, and a loop over documents at random that prefetches each one's data
 * stalls on that read first: prefetch the entry IX_DOC_OFF_AHEAD documents before the
 * document is used (a few before its data is prefetched). */
#define IX_DOC_OFF_AHEAD 4
static inline void ix_doc_prefetch_off(const ix_index *ix, int64_t doc)
{
    const ix_segment *sg = ix_doc_segment(ix, doc);
    __builtin_prefetch(sg->doc_off + (doc - sg->doc_base));
}

/* Posting list of cluster `cid` in segment `sg`: positions [*p0, *p0 + *n). */
static inline void ix_segment_list(const ix_segment *sg, uint32_t cid, int64_t *p0, int64_t *n)
{
    uint32_t l = sg->post_cid ? cm_find_u32(sg->post_cid, sg->n_lists, cid) : cid;
    if (l >= sg->n_lists) {
        *p0 = 0;
        *n = 0;
        return;
    }
    *p0 = sg->post_off[l];
    *n = sg->post_off[l + 1] - *p0;
}

/* The user id of global document `doc`. */
static inline int64_t ix_doc_id(const ix_index *ix, int64_t doc)
{
    const ix_segment *sg = ix_doc_segment(ix, doc);
    return sg->doc_ids[doc - sg->doc_base];
}

/* The global document that holds user id `id` and is not deleted, or -1: a binary
 * search of each segment's id_order (a deleted document's id may be used again). */
int64_t ix_find_id(const ix_index *ix, int64_t id);

/* Opens and validates, as hostile input, everything that costs at most one pass over a
 * small section or over the id-sized ones search indexes with: sizes against the meta's
 * counts; offsets monotone and in range; posting, token and graph ids in range; user ids
 * non-negative; the deletion bitmap's padding bits clear and its count equal to the
 * meta's n_deleted (when present); every centroid finite; and on 64 tokens spread over
 * the index, the B-bit codes consistent with `bits` (every token's code shows a changed
 * `bits`), the factors finite and plausible, and the cluster-major copies equal to the
 * doc-major ones. With verify, every payload checksum. Errors name the section and what
 * was expected: CHIMERA_ERR_CORRUPT, or the store's statuses. */
chimera_status ix_open(const char *dir, int verify, ix_index *ix, chimera_error *err);
/* The same over a store already opened (a writer that opened it under the lock); the
 * index takes the store, and closes it on failure too. */
chimera_status ix_open_store(store *st, ix_index *ix, chimera_error *err);
void ix_close(ix_index *ix);

/* order[0..n) = 0..n-1 sorted by (ids[i], i): a segment's id_order. */
chimera_status ix_id_order_compute(const int64_t *ids, int64_t n, uint32_t *order,
                                   chimera_error *err);

/* Deep check (chimera check), after every payload checksum: every token in exactly one
 * posting list, post_doc and tok_cid consistent with the lists and the documents, the
 * cluster-major codes and factors equal to the doc-major ones, every B-bit code within
 * `bits` with its top plane equal to the 1-bit plane, every factor finite and within
 * the range its definition allows, user ids non-negative and unique, graph valid.
 * @return CHIMERA_OK; CHIMERA_ERR_CORRUPT naming the section; CHIMERA_ERR_EMPTY when
 *         every document is deleted (a consistent index that no search can answer);
 *         CHIMERA_ERR_NOMEM. */
chimera_status ix_check(const ix_index *ix, chimera_error *err);

/* The generation and data identity (ix_store_data_id) of the index at dir now, from its
 * manifest alone: how a handle learns that there is something new to open. */
chimera_status ix_peek(const char *dir, uint64_t *generation, uint64_t *data_id,
                       chimera_error *err);

/* The manifest-only summary behind `chimera info`. */
chimera_status ix_info(const char *dir, chimera_index_info *info, chimera_error *err);

/* ---- the stored vectors (sections vectors_f32, vectors_bf16, vectors_f16) ------------ */

/* The section of the list that holds vectors of element type `type` (a chimera_rerank
 * other than NONE), and its element size. */
int ix_vec_section(int type);
size_t ix_vec_elem_bytes(int type);

/* dst[0..n) = src[0..n) in element type `type` (round to nearest even); and back. */
void ix_vec_encode(int type, const float *src, size_t n, void *dst);
void ix_vec_decode(int type, const void *src, size_t n, float *dst);

/* Writes every row of corpus c as section `name` [n_tokens, dim] of element type
 * `type`, converted and streamed in blocks (the corpus is never copied whole). */
typedef struct ix_store_writer ix_store_writer;
chimera_status ix_vec_write(ix_store_writer *w, const char *name, int type, const data_corpus *c,
                            chimera_error *err);

/* 1 when the GPU backend uploads this section (sections.h: IX_DEVICE). A name the list
 * does not know (a section a newer writer added) counts as device-resident: the
 * conservative reading of how much GPU memory the index needs. */
int ix_section_on_device(const char *name);

static inline int ix_is_deleted(const ix_index *ix, int64_t doc)
{
    return (ix->deleted[doc >> 3] >> (doc & 7)) & 1;
}

#endif
