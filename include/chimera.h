/* chimera.h — Chimera: multi-vector (late-interaction) retrieval on CPU and GPU.
 *
 * A corpus is a set of documents; each document is a set of token vectors in R^d
 * (ColBERT style: L2-normalised, d = 96 or 128, tens to hundreds of tokens). A query is
 * a set of m token vectors. The score of a document is its Chamfer (MaxSim) similarity
 *
 *     F(Q, D) = sum over query tokens q of  max over document tokens v of <q, v>
 *
 * and a search returns the k documents with the highest score. Chimera finds them
 * through a fine-grained IVF over all document tokens, RaBitQ-quantised codes (1-bit
 * for filtering, B-bit for re-scoring) and a three-stage pipeline; exact search by
 * brute force is provided as the reference every recall figure is measured against.
 *
 * Life cycle
 *   chimera_corpus_open()      map a token matrix (.npy) and its document lengths
 *   chimera_queries_open()     read query token sets
 *   chimera_index_build()      build an index of a corpus into a directory
 *   chimera_index_open()       map an index for searching
 *   chimera_exact_search()     exact top-k by Chamfer score (ground truth)
 *   chimera_trec_write()       write results as a TREC run
 *   chimera_run_read(), chimera_eval_recall(), chimera_eval_qrels()   evaluate runs
 *   ..._close() / ..._free()   every object returned has one
 *
 * Conventions
 *   - Every fallible function returns chimera_status: CHIMERA_OK (0) or a negative code.
 *   - Constructors take `T **out` and set *out = NULL on failure; their optional
 *     `chimera_error *err` receives a message naming what was wrong.
 *   - Methods on a handle keep their last message on the handle (`..._errmsg`), valid
 *     until the next call on that handle.
 *   - Options structs: zero means default; initialise with `= {0}` and set what you need.
 *   - Outputs are caller-owned arrays; unused result slots are padded with id -1 and
 *     score -INFINITY.
 *   - Handles are not thread-safe unless stated; distinct handles are independent.
 *
 * Example: exact top-10 for a query file
 *
 *   chimera_error err;
 *   chimera_corpus *c;
 *   chimera_queries *q;
 *   if (chimera_corpus_open("tokens.npy", "doclens.npy", NULL, NULL, &c, &err) ||
 *       chimera_queries_open("queries.npy", NULL, &q, &err)) {
 *       fprintf(stderr, "%s\n", err.msg);
 *       return 1;
 *   }
 *   int64_t n = chimera_queries_count(q);
 *   int64_t *ids = malloc(n * 10 * sizeof *ids);
 *   float *scores = malloc(n * 10 * sizeof *scores);
 *   if (chimera_exact_search(c, q, 10, NULL, ids, scores) == CHIMERA_OK)
 *       chimera_trec_write("run.trec", n, 10, ids, scores, "exact", &err);
 *   chimera_queries_free(q);
 *   chimera_corpus_close(c);
 */
#ifndef CHIMERA_H
#define CHIMERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHIMERA_VERSION_MAJOR 0
#define CHIMERA_VERSION_MINOR 1
#define CHIMERA_VERSION_PATCH 0
#define CHIMERA_VERSION_STRING "0.1.0"

/* The most threads a call accepts (n_threads in the options structs below, which must be
 * 0..CHIMERA_MAX_THREADS): a bound that turns a mistyped count into an error instead of
 * thousands of threads started. */
#define CHIMERA_MAX_THREADS 1024

/* ---------------------------------------------------------------------------------- */
/* Status codes and errors                                                            */
/* ---------------------------------------------------------------------------------- */

/* Negative, explicitly numbered, never renumbered or reused. */
typedef enum chimera_status {
    CHIMERA_OK = 0,
    CHIMERA_ERR_INVALID_ARG = -1, /* a parameter is out of range or NULL */
    CHIMERA_ERR_NOMEM = -2,       /* an allocation failed */
    CHIMERA_ERR_IO = -3,          /* a file could not be opened, read, written or synced */
    CHIMERA_ERR_FORMAT = -4,      /* an input file is malformed (npy header, TREC line) */
    CHIMERA_ERR_CORRUPT = -5,     /* an index failed validation or a checksum */
    CHIMERA_ERR_VERSION = -6,     /* an index of an unsupported format version */
    CHIMERA_ERR_DIM = -7,         /* shapes or dimensions do not agree */
    CHIMERA_ERR_VALUE = -8,       /* NaN, Inf or an out-of-range value in the data */
    CHIMERA_ERR_EMPTY = -9,       /* an empty document or query where none is allowed */
    CHIMERA_ERR_DEVICE = -10,     /* a GPU call failed or no device is usable */
    CHIMERA_ERR_UNSUPPORTED = -11, /* valid but not supported (dtype, byte order, ...) */
    CHIMERA_ERR_CANCELLED = -12,  /* a progress callback asked to stop */
    CHIMERA_ERR_INTERNAL = -13,   /* a bug in Chimera; please report it */
    CHIMERA_ERR_BUSY = -14,       /* another process is changing the index and kept it
                                     locked past the wait; try again later */
    CHIMERA_ERR_CONFLICT = -15,   /* the index changed since the caller read it (a
                                     rebuild under a tune); redo the work on the new one */
} chimera_status;

/* A status with its message; filled by constructors and free functions. */
typedef struct chimera_error {
    chimera_status code;
    char msg[256];
} chimera_error;

/* Static name of a status ("CHIMERA_ERR_IO"); never NULL. */
const char *chimera_status_str(chimera_status status);

/* "MAJOR.MINOR.PATCH" of the library actually linked. */
const char *chimera_version(void);

/* The SIMD level of the kernels in use: "scalar", "avx2" or "avx512" — the best this
 * CPU (and its OS) supports, capped by CHIMERA_SIMD=scalar|avx2|avx512 in the
 * environment, decided once per process. Static string; never fails. */
const char *chimera_simd_level(void);

/* Progress callback for long work: `phase` names the step ("kmeans", "exact search"),
 * `fraction` runs from 0 to 1 (1 once per phase, at its end). May be called from
 * worker threads, so it must be thread-safe. */
typedef void (*chimera_progress_fn)(void *user, const char *phase, double fraction);

/* ---------------------------------------------------------------------------------- */
/* Runtime                                                                            */
/* ---------------------------------------------------------------------------------- */

typedef struct chimera_runtime_info {
    const char *simd;          /* kernel level in use: "scalar", "avx2" or "avx512" */
    const char *blas_core;     /* OpenBLAS kernel family, e.g. "Zen", "SkylakeX" */
    const char *blas_suggested_coretype; /* NULL, or a better OPENBLAS_CORETYPE value */
    int n_cpus;                /* online CPUs */
    int cuda_compiled;         /* 1 when the CUDA backend was built in */
    int n_cuda_devices;        /* usable CUDA devices (0 without CUDA or a driver) */
    char cuda_status[128];     /* why no device is usable, or the first device's name */
} chimera_runtime_info;

/* Fills *info (probes for CUDA devices, which may take a moment). Never fails. */
void chimera_runtime_info_get(chimera_runtime_info *info);

/* NULL when the BLAS kernels in use suit this CPU or the user has set
 * OPENBLAS_CORETYPE; otherwise the OPENBLAS_CORETYPE value ("SkylakeX", "Haswell")
 * that would replace a generic fallback (Debian 12's OpenBLAS runs SSE3 kernels on CPUs
 * it does not know, 3-6x slower). It only takes effect in a process started with it:
 * the CLI re-executes itself with the variable set. */
const char *chimera_blas_suggested_coretype(void);

/* Which file the library has mapped at `addr`, for a front end's SIGBUS handler. The
 * library maps index sections and .npy inputs and reads them in place; when such a file
 * is truncated while mapped (index files never are by Chimera: docs/format.md), the
 * next access to a page past its new end raises SIGBUS. The library installs no signal
 * handlers (they belong to the application); a handler installed with SA_SIGINFO may
 * pass si_addr here and report the file before exiting.
 * @param addr  any address
 * @param buf   receives the file's path (its tail when longer than the registry keeps,
 *              about 190 bytes), NUL-terminated and truncated to n - 1 bytes; "" when
 *              addr is in no mapping the library holds
 * @return the bytes written before the NUL; 0 when addr is not in a library mapping.
 * @note Async-signal-safe: no locks, no allocation (a fixed table of lock-free atomics).
 *       Never fails; mappings beyond the table's capacity (256) are simply unnamed. */
size_t chimera_mapping_describe(const void *addr, char *buf, size_t n);

/* ---------------------------------------------------------------------------------- */
/* Corpus: the document token vectors                                                 */
/* ---------------------------------------------------------------------------------- */

/* A token matrix [n_tokens, dim] with document lengths [n_docs] (documents are
 * consecutive runs of rows) and optional user ids. Read-only once opened. */
typedef struct chimera_corpus chimera_corpus;

typedef struct chimera_corpus_opts {
    int allow_empty;      /* 1: accept zero-length documents (they are never returned) */
    int skip_value_check; /* 1: do not scan tokens for NaN/Inf at open */
} chimera_corpus_opts;

/* Maps `tokens_npy` (float32 or float16, [n_tokens, dim], C order) and reads
 * `doclens_npy` (int32 or int64, [n_docs]). `ids_path` (may be NULL) gives user ids:
 * an int64 .npy of n_docs entries, or a text file with one integer per line; without
 * it a document's id is its row in doclens. Checks shapes, that the lengths sum to
 * n_tokens, that no document is empty (unless allowed), that ids are unique, and (unless
 * skipped) that every token is finite; every error names the file and the row.
 * @return CHIMERA_OK, _IO, _FORMAT, _UNSUPPORTED, _DIM, _VALUE, _EMPTY or _NOMEM.
 * @note The token matrix stays memory-mapped, never copied: it may exceed RAM. */
chimera_status chimera_corpus_open(const char *tokens_npy, const char *doclens_npy,
                                   const char *ids_path, const chimera_corpus_opts *opts,
                                   chimera_corpus **out, chimera_error *err);

/* Wraps caller memory (float32 tokens, int64 doclens, optional int64 ids) with the same
 * checks as chimera_corpus_open. @note Nothing is copied: the arrays must outlive the
 * corpus. */
chimera_status chimera_corpus_wrap(const float *tokens, int64_t n_tokens, uint32_t dim,
                                   const int64_t *doclens, int64_t n_docs, const int64_t *ids,
                                   const chimera_corpus_opts *opts, chimera_corpus **out,
                                   chimera_error *err);

int64_t chimera_corpus_n_docs(const chimera_corpus *corpus);
int64_t chimera_corpus_n_tokens(const chimera_corpus *corpus);
uint32_t chimera_corpus_dim(const chimera_corpus *corpus);
/* The last error message of a call on this corpus ("" if none). */
const char *chimera_corpus_errmsg(const chimera_corpus *corpus);
void chimera_corpus_close(chimera_corpus *corpus);

/* ---------------------------------------------------------------------------------- */
/* Queries                                                                            */
/* ---------------------------------------------------------------------------------- */

typedef struct chimera_queries chimera_queries;

/* Reads queries: either [n_queries, m, dim] (every query has m tokens) or [total, dim]
 * with `qlens_npy` giving each query's token count (int32/int64). float32 or float16.
 * Empty queries and NaN/Inf are errors naming the query. The tokens are copied. */
chimera_status chimera_queries_open(const char *queries_npy, const char *qlens_npy,
                                    chimera_queries **out, chimera_error *err);

/* Copies caller memory: `tokens` holds all query tokens back to back; `qlens` gives
 * each query's length, or is NULL when all have `m` tokens. */
chimera_status chimera_queries_new(const float *tokens, int64_t n_queries, uint32_t dim,
                                   const int64_t *qlens, uint32_t m, chimera_queries **out,
                                   chimera_error *err);

int64_t chimera_queries_count(const chimera_queries *queries);
uint32_t chimera_queries_dim(const chimera_queries *queries);
/* A new query set holding queries [start, start + count) of q (copied). */
chimera_status chimera_queries_slice(const chimera_queries *q, int64_t start, int64_t count,
                                     chimera_queries **out, chimera_error *err);

/* Number of tokens of query i (0 <= i < count). */
uint32_t chimera_queries_len(const chimera_queries *queries, int64_t i);
void chimera_queries_free(chimera_queries *queries);

/* ---------------------------------------------------------------------------------- */
/* Exact search (ground truth)                                                        */
/* ---------------------------------------------------------------------------------- */

typedef struct chimera_exact_opts {
    int n_threads;               /* 0: one per CPU */
    chimera_progress_fn progress; /* optional */
    void *progress_user;
} chimera_exact_opts;

/* Exact Chamfer top-k of every query over the whole corpus, by blocked sgemm over the
 * (memory-mapped) token matrix: ids[i*k + r] and scores[i*k + r] are query i's r-th best
 * document (user id) and its score, best first; ties go to the earlier document.
 * @return CHIMERA_OK, _INVALID_ARG (k == 0), _DIM (query dim differs), _NOMEM, _VALUE
 *         (a float16 token overflows); message on the corpus. */
chimera_status chimera_exact_search(chimera_corpus *corpus, const chimera_queries *queries,
                                    uint32_t k, const chimera_exact_opts *opts, int64_t *ids,
                                    float *scores);

/* ---------------------------------------------------------------------------------- */
/* Index: build, open, inspect                                                        */
/* ---------------------------------------------------------------------------------- */

typedef struct chimera_index chimera_index;

typedef struct chimera_build_opts {
    uint32_t bits;          /* bits per dimension of the full codes, 1..8 (0: 4) */
    uint32_t n_clusters;    /* IVF clusters (0: about one per 100 tokens) */
    uint32_t graph_degree;  /* out-degree of the centroid graph (0: 32) */
    int n_threads;          /* 0: one per CPU */
    uint64_t seed;          /* every random step derives from it */
    int no_sync;            /* 1: skip fsyncs (scratch indexes; the swap stays atomic) */
    chimera_progress_fn progress;
    void *progress_user;
} chimera_build_opts;

#define CHIMERA_MAX_PHASES 8

typedef struct chimera_build_report {
    int n_phases;
    const char *phase[CHIMERA_MAX_PHASES]; /* "sample", "kmeans", "assign", ... (static) */
    double seconds[CHIMERA_MAX_PHASES];
    double total_seconds;
    uint64_t peak_rss_bytes;
    uint32_t n_clusters;
    double assign_recall;   /* fraction of tokens given their exact nearest centroid */
    uint64_t index_bytes;   /* bytes of all sections */
} chimera_build_report;

/* Builds an index of `corpus` into directory `dir` (its parent must exist). The build
 * writes into a temporary directory beside `dir` and swaps it in only when complete and
 * synced, so an existing index at `dir` is never damaged by a failed or killed build;
 * a non-index directory at `dir` is refused. report (may be NULL) gets per-phase times.
 * @return CHIMERA_OK, _INVALID_ARG, _IO, _NOMEM; message in err. */
chimera_status chimera_index_build(const chimera_corpus *corpus, const char *dir,
                                   const chimera_build_opts *opts, chimera_build_report *report,
                                   chimera_error *err);

typedef struct chimera_open_opts {
    int verify;             /* 1: recompute every section's payload checksum before
                               returning (reads all the data once; `chimera search
                               --verify`). Catches damage such as flipped bits; content
                               that is wrong but consistently checksummed is what
                               chimera_index_check finds. */
} chimera_open_opts;

/* Opens (maps) an index, checking its format version, every section's presence and
 * size against the counts, and the cheap invariants of its values: offsets, posting,
 * token and graph ids in range, user ids >= 0, the deletion bitmap against the
 * manifest's count, every centroid finite, the first tokens' codes consistent with the
 * index's bits. With opts->verify, every payload checksum too. The deep checks (every
 * code and factor, unique ids) are chimera_index_check's.
 * @return CHIMERA_OK, _IO, _VERSION, _CORRUPT (names the section), _NOMEM.
 * @note Index files are replaced only by rename, never modified in place; a file
 *       truncated in place by hand while mapped faults on access (SIGBUS; see
 *       chimera_mapping_describe). */
chimera_status chimera_index_open(const char *dir, const chimera_open_opts *opts,
                                  chimera_index **out, chimera_error *err);
void chimera_index_close(chimera_index *index);
const char *chimera_index_errmsg(const chimera_index *index);

/* The deep consistency check (`chimera check`): every checksum, then every token in
 * exactly one posting list, lists consistent with documents and centroids, the two
 * copies of the 1-bit codes and factors equal, every B-bit code within the index's bits
 * and agreeing with its 1-bit plane, every centroid and factor finite and within the
 * range RaBitQ allows, user ids >= 0 and unique, a valid graph whose every node is
 * reachable. The message (chimera_index_errmsg) names the section.
 * @return CHIMERA_OK, _CORRUPT, _EMPTY (a consistent index whose documents are all
 *         deleted: every search would fail with _EMPTY), _NOMEM. */
chimera_status chimera_index_check(chimera_index *index);

int64_t chimera_index_n_docs(const chimera_index *index);
uint32_t chimera_index_dim(const chimera_index *index);

typedef struct chimera_section_info {
    char name[24];
    char dtype[8];
    uint64_t bytes;
    int device_resident;    /* 1: uploaded to the GPU by the CUDA backend */
} chimera_section_info;

#define CHIMERA_INFO_MAX_SECTIONS 32

/* What `chimera info IDX` prints; read from the manifest alone (nothing is mapped). */
typedef struct chimera_index_info {
    uint32_t format_major, format_minor;
    char library_version[16];
    uint32_t dim, dim_pad, bits, n_clusters, graph_degree;
    int64_t n_docs, n_tokens;
    int64_t list_min, list_median, list_max;
    double list_mean, list_imbalance;
    uint32_t list_empty;
    uint64_t bytes_device, bytes_host, bytes_total;
    uint32_t n_sections;
    chimera_section_info sections[CHIMERA_INFO_MAX_SECTIONS];
    char seed[24];
    int build_threads;
    double assign_recall;
    double build_seconds;
    uint64_t build_peak_rss;
    int n_phases;
    char phase[CHIMERA_MAX_PHASES][16];
    double phase_seconds[CHIMERA_MAX_PHASES];
    uint64_t generation;    /* 1 for a new index, + 1 per change since (0: written before
                               generations were recorded) */
} chimera_index_info;

chimera_status chimera_index_info_read(const char *dir, chimera_index_info *info,
                                       chimera_error *err);

/* ---------------------------------------------------------------------------------- */
/* Search                                                                             */
/* ---------------------------------------------------------------------------------- */

/* The pipeline's knobs; zero means the default (chimera_search_defaults fills them). */
typedef struct chimera_search_params {
    uint32_t n_probe;   /* clusters probed per query token */
    uint32_t k_refine;  /* documents kept by 1-bit partial scores (refinement) */
    uint32_t k_fullbit; /* documents re-scored with the full-bit codes (>= k) */
    uint32_t chunks;    /* document-scoring chunks overlapped with re-scoring */
    int impute;         /* refinement floor for unseen tokens: 0 the n_probe-th centroid
                           score (default), 1 zero, 2 the smallest estimate seen */
    int probe;          /* centroid search: 0 backend's choice, 1 brute force, 2 graph */
} chimera_search_params;

/* The defaults for top-k (and any preset given), written into *p. */
void chimera_search_defaults(uint32_t k, chimera_search_params *p);

typedef struct chimera_search_opts {
    int n_threads;        /* 0: one per CPU */
    int latency_mode;     /* 1: one query at a time with all threads; 0: queries spread
                             over the threads (throughput) */
    const char *backend;  /* NULL or "auto", "cpu", "cuda" */
} chimera_search_opts;

/* What a search measured (sums over its queries). */
typedef struct chimera_search_profile {
    double seconds;             /* wall time of the call */
    double t_generate, t_refine, t_score1, t_fullbit, t_fullbit_wait; /* summed per query */
    uint64_t tokens_refined;    /* posting entries given a 1-bit estimate */
    uint64_t docs_touched;      /* documents seen in refinement */
    uint64_t n_refined;         /* documents kept by refinement (and 1-bit scored) */
    uint64_t n_fullbit;         /* documents re-scored at full precision */
    uint64_t bytes_up, bytes_down; /* across the host/device boundary */
    double *latency;            /* optional caller array [n_queries]: seconds per query */
    char backend[16];           /* the backend that ran */
} chimera_search_profile;

/* Searches every query: ids[i*k + r], scores[i*k + r] = query i's r-th result (user id,
 * full-bit estimated Chamfer score), best first, padded with -1 / -INFINITY. params and
 * opts may be NULL (defaults); profile may be NULL.
 * @return CHIMERA_OK, _INVALID_ARG, _DIM (query dimension differs from the index's),
 *         _EMPTY (every document of the index is deleted), _CORRUPT (a score came out
 *         NaN or infinite, or a factor it needed is: the message names the section; no
 *         result is returned for a damaged index), _DEVICE, _UNSUPPORTED (backend),
 *         _NOMEM; message on the index. */
chimera_status chimera_index_search(chimera_index *index, const chimera_queries *queries,
                                    uint32_t k, const chimera_search_params *params,
                                    const chimera_search_opts *opts, int64_t *ids,
                                    float *scores, chimera_search_profile *profile);

/* ---------------------------------------------------------------------------------- */
/* Tuning for a target recall                                                         */
/* ---------------------------------------------------------------------------------- */

typedef struct chimera_tune_point {
    chimera_search_params params;
    double recall, qps;
} chimera_tune_point;

typedef struct chimera_tune_result {
    chimera_search_params best; /* the fastest setting found that reaches the target */
    double recall, qps;         /* measured at best */
    int reached;                /* 0: the target was out of reach; best is the closest */
    int n_points;
    chimera_tune_point points[96]; /* every setting tried, in order */
    uint64_t index_generation;  /* the generation of the index tuned (its manifest's) */
    uint64_t index_data_id;     /* the identity of its data (section checksums); profile
                                   save refuses an index whose data differs. 0: unknown,
                                   not checked (a result not made by chimera_index_tune) */
} chimera_tune_result;

/* The paper's backward procedure: generous n_probe and k_refine, raise k_fullbit until
 * Recall@k >= target against `truth_ids` [n_queries x truth_k] (exact results, e.g.
 * from chimera_exact_search), then shrink k_refine, then n_probe, keeping the target.
 * @return CHIMERA_OK (see res->reached), _INVALID_ARG, or a search error. */
chimera_status chimera_index_tune(chimera_index *index, const chimera_queries *queries,
                                  const int64_t *truth_ids, uint32_t truth_k, uint32_t k,
                                  double target_recall, const chimera_search_opts *opts,
                                  chimera_tune_result *res);

/* Stores `res` in the index at `dir` as the profile for (k, target_recall), replacing one
 * with the same key; the manifest is rewritten atomically (sections untouched). It is a
 * read-modify-write under the index's writer lock, so it merges with what other writers
 * committed meanwhile (two tunes saving at once keep both profiles), and it waits for a
 * writer that holds the lock (a build's commit) up to 30 s.
 * @return CHIMERA_OK, _INVALID_ARG, the statuses of opening the index, _CONFLICT (the
 *         index's data is not the one res was measured on: it was rebuilt since; tune
 *         again), _BUSY (another process kept the index locked), _IO, _NOMEM. */
chimera_status chimera_index_profile_save(const char *dir, uint32_t k, double target_recall,
                                          const chimera_tune_result *res, chimera_error *err);

/* The stored profile for top-k whose target is the smallest >= target_recall (any k'
 * >= k qualifies when no profile has this k). @return CHIMERA_OK, _EMPTY (none), or
 * _CORRUPT (that profile holds a missing or out-of-range value; message on the handle). */
chimera_status chimera_index_profile_get(const chimera_index *index, uint32_t k,
                                         double target_recall, chimera_search_params *p);

/* Recall@k of result ids [n x run_k] against exact ids [n x truth_k] (as the paper:
 * |R ∩ R'| / k per query, averaged; -1 entries are padding). */
double chimera_recall_ids(const int64_t *run, uint32_t run_k, const int64_t *truth,
                          uint32_t truth_k, int64_t n_queries, uint32_t k);

/* Pseudo-queries for tuning without a query log: each takes m tokens of a random
 * document (with replacement when it is shorter) plus a little noise, normalised. */
chimera_status chimera_corpus_sample_queries(const chimera_corpus *corpus, int64_t n,
                                             uint32_t m, uint64_t seed,
                                             chimera_queries **out, chimera_error *err);

/* ---------------------------------------------------------------------------------- */
/* Result files and evaluation                                                        */
/* ---------------------------------------------------------------------------------- */

/* Writes results as a TREC run, one line per hit: `qid Q0 docid rank score tag`, with
 * qid the query's index, rank from 1; padding (-1) entries are skipped. The file is
 * written to a temporary name and renamed into place, so a failure leaves no partial
 * file and an existing one untouched. */
chimera_status chimera_trec_write(const char *path, int64_t n_queries, uint32_t k,
                                  const int64_t *ids, const float *scores, const char *tag,
                                  chimera_error *err);

/* A TREC run (`qid Q0 docid rank score tag`) or qrels (`qid 0 docid relevance`) file
 * in memory. Ids are strings, so runs of other systems can be compared too. */
typedef struct chimera_run chimera_run;

chimera_status chimera_run_read(const char *path, chimera_run **out, chimera_error *err);
chimera_status chimera_qrels_read(const char *path, chimera_run **out, chimera_error *err);
int64_t chimera_run_n_queries(const chimera_run *run);

/* Top-k document ids of queries "0" .. "n_queries-1" of a run whose ids are integers
 * (runs written by chimera): ids[i*k + r], -1 where the run has fewer.
 * @return CHIMERA_OK or _FORMAT (a non-integer document id). */
chimera_status chimera_run_topk_ids(const chimera_run *run, int64_t n_queries, uint32_t k,
                                    int64_t *ids, chimera_error *err);
void chimera_run_free(chimera_run *run);

/* Recall@k as in the paper: for each query of `truth`, |top-k(run) ∩ top-k(truth)| / k'
 * with k' = min(k, hits of truth for that query), averaged over the queries of truth (a
 * query missing from the run counts 0). Hits are ordered by rank (then score).
 * *n_queries (may be NULL) receives the number of queries averaged. */
chimera_status chimera_eval_recall(const chimera_run *run, const chimera_run *truth, uint32_t k,
                                   double *recall, int64_t *n_queries, chimera_error *err);

/* MRR@10 and NDCG@10 of `run` against graded `qrels` (relevance > 0 is relevant; NDCG
 * uses the grades as gains), averaged over the queries that have a relevant document. */
chimera_status chimera_eval_qrels(const chimera_run *run, const chimera_run *qrels,
                                  double *mrr10, double *ndcg10, int64_t *n_queries,
                                  chimera_error *err);

/* ---------------------------------------------------------------------------------- */
/* Synthetic corpora                                                                  */
/* ---------------------------------------------------------------------------------- */

typedef struct chimera_synth_opts {
    int64_t n_docs;      /* 0: 10,000 */
    uint32_t dim;        /* 0: 128 */
    int64_t n_queries;   /* 0: 100 */
    uint32_t query_len;  /* 0: 32 */
    uint64_t seed;       /* 0 is a valid seed (the default) */
    uint32_t vocab;      /* 0: 30,000 words */
    uint32_t n_topics;   /* 0: 200 */
    uint32_t min_len;    /* 0: 16 tokens */
    uint32_t max_len;    /* 0: 300 tokens */
    chimera_progress_fn progress;
    void *progress_user;
} chimera_synth_opts;

/* Writes a corpus that behaves like contextual token embeddings into `out_dir` (created
 * if missing): tokens.npy [n_tokens, dim] f32 (L2-normalised), doclens.npy [n_docs] i64,
 * queries.npy [n_queries, query_len, dim] f32 and qrels.tsv (each query's target
 * document). Words follow a Zipf law over a vocabulary and recur across documents,
 * documents have topics and lengths vary; each query is made from its target
 * document's words and topic plus noise. Deterministic for a seed. Each file is written
 * to a temporary name and renamed, so a failure leaves none half-written. */
chimera_status chimera_synth_write(const char *out_dir, const chimera_synth_opts *opts,
                                   chimera_error *err);

#ifdef __cplusplus
}
#endif

#endif
