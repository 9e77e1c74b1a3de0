/* chimera.h — Chimera: multi-vector (late-interaction) retrieval on CPU and GPU.
 *
 * This header is the library's manual: what it does, the life cycle and ownership of
 * every object, which calls may run at once, what the library does to the process, and
 * the rules for how the API changes. Everything else in the source tree is private.
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
 * Example: build an index, open it, search it, close it
 *
 *   chimera_corpus *corpus = NULL;
 *   chimera_index *index = NULL;
 *   chimera_queries *queries = NULL;
 *   chimera_error err = {0};
 *   if (chimera_corpus_open("tokens.npy", "doclens.npy", NULL, NULL, &corpus, &err) ||
 *       chimera_index_build(corpus, "my.idx", NULL, NULL, &err) ||
 *       chimera_index_open("my.idx", NULL, &index, &err) ||
 *       chimera_queries_read("queries.npy", NULL, &queries, &err))
 *       goto done;                                   // err.msg names what was wrong
 *   int64_t n = chimera_queries_count(queries);
 *   int64_t *ids = malloc(n * 10 * sizeof *ids);     // query i's r-th hit: ids[i*10 + r]
 *   float *scores = malloc(n * 10 * sizeof *scores);
 *   if (chimera_index_search(index, queries, 10, NULL, NULL, ids, scores, NULL, &err) == 0)
 *       printf("query 0: document %lld\n", (long long)ids[0]);
 *   free(ids), free(scores);
 * done:
 *   chimera_queries_free(queries);                   // every close/free accepts NULL
 *   chimera_index_close(index);
 *   chimera_corpus_close(corpus);
 *
 * Objects and their life cycles
 *   chimera_corpus   chimera_corpus_open (maps a .npy token matrix) or _wrap (borrows
 *                    caller arrays) → chimera_index_build, chimera_corpus_search,
 *                    chimera_corpus_sample_queries → chimera_corpus_close.
 *   chimera_queries  chimera_queries_read (.npy file), _new (caller arrays), _slice, or
 *                    chimera_corpus_sample_queries → any search → chimera_queries_free.
 *   an index         chimera_index_build writes a directory; it is a file, not a handle.
 *                    chimera_index_info_read reads its manifest without opening it;
 *                    chimera_index_profile_save stores a tuned setting in it.
 *                    chimera_index_add, _delete, _update and _compact change it in
 *                    place, one atomic commit each, without a rebuild.
 *   chimera_index    chimera_index_open (maps the directory) → chimera_index_search,
 *                    _tune, _check, _profile_get → chimera_index_close. A handle sees
 *                    the index as it was at open (one consistent generation) until
 *                    chimera_index_refresh moves it to the newest one; the files of
 *                    the old generation stay valid while mapped.
 *   chimera_run      chimera_run_read (a TREC run) or chimera_run_read_qrels →
 *                    chimera_run_eval_recall, _eval_qrels, _topk_ids → chimera_run_free.
 *   results          the caller's ids[] and scores[] arrays a search fills:
 *                    chimera_results_write (a TREC run file), chimera_results_eval_recall.
 *
 * Who owns what
 *   - Every object returned through `T **out` belongs to the caller, who releases it
 *     with its own _close / _free (each accepts NULL). Closing one object never closes
 *     another: a corpus may be closed while an index built from it stays open.
 *   - Inputs are borrowed for the call only, except chimera_corpus_wrap's arrays, which
 *     must outlive the corpus (nothing is copied). chimera_queries_new copies.
 *   - Outputs are caller-owned arrays of the documented size; unused result slots are
 *     padded with id -1 and score -INFINITY. The library keeps no pointer to them after
 *     the call returns.
 *   - Returned strings are static (names, versions); messages come back in the
 *     caller's chimera_error, never kept on a handle.
 *   - Memory-mapped files (a corpus's tokens, an index's sections) stay mapped until
 *     the handle's close; see chimera_mapping_describe for what a truncated file does.
 *
 * Threads
 *   Distinct handles are always independent. Per handle:
 *   - chimera_index: sees one generation of its index at a time; chimera_index_search,
 *     _tune, _check, _profile_get, _ids, chimera_filter_sql and chimera_index_refresh
 *     may be called from any number of threads at once, each call with its own outputs
 *     and chimera_error (search state is pooled inside the handle: see
 *     chimera_index_search; a refresh moves the handle to a newer generation while
 *     running calls finish on theirs).
 *   - chimera_filter: immutable; one filter may serve any number of calls at once.
 *   - chimera_corpus: after open, immutable; chimera_corpus_search may be called from any
 *     number of threads at once, and so may index builds reading it.
 *   - chimera_queries, chimera_run: immutable after creation; every function on them
 *     takes a const handle and may run from any number of threads.
 *   - Functions without a handle (build, add, delete, update, compact, meta import,
 *     info, profile save, result files, synth, names, version, runtime info) are
 *     reentrant. The changes of one index directory serialise on its writer lock, also
 *     across processes; readers never wait for it.
 *   - No call may be in flight on a handle that is being closed.
 *   - Calls with n_threads > 1 run their own worker threads and join them before
 *     returning; progress callbacks are called from those threads.
 *
 * What the library does to the process
 *   - BLAS threads. Exact search and index builds multiply matrices with OpenBLAS from
 *     inside Chimera's own worker threads, so OpenBLAS's threads on top would
 *     oversubscribe the cores. On its first matrix multiply the library therefore calls
 *     openblas_set_num_threads(1), and OpenBLAS's thread count is process-wide: any
 *     other user of the same OpenBLAS in the process (numpy linked to it, say) becomes
 *     single-threaded too. To opt out, set CHIMERA_BLAS_THREADS=keep in the environment
 *     before that first call: the library then never changes OpenBLAS's setting (set
 *     OPENBLAS_NUM_THREADS or use n_threads = 1 to avoid the oversubscription).
 *     chimera_runtime_info_get reports which applies.
 *   - SIMD level: chosen once per process (chimera_simd_level; CHIMERA_SIMD caps it).
 *   - No signal handlers, no atexit hooks, no global locale or stdio changes, nothing
 *     printed: messages go to chimera_error, handles and progress callbacks.
 *   - Memory comes from malloc; worker threads exist only during a call (an open index
 *     may keep an idle pool of them until close), and GPU memory only while a CUDA
 *     search engine lives on an index handle.
 *
 * Conventions
 *   - Every fallible function returns chimera_status: CHIMERA_OK (0) or a negative code.
 *   - Constructors take `T **out` and set *out = NULL on failure; their optional
 *     `chimera_error *err` receives a message naming what was wrong.
 *   - Methods on a handle (search, exact search, check, tune, profile_get) take an
 *     optional `chimera_error *err` last, like constructors: errors are per call, never
 *     kept on a handle, so calls on one handle from several threads cannot see each
 *     other's messages.
 *   - Names are chimera_<object>_<verb> (chimera_index_open, chimera_run_eval_recall);
 *     accessors are chimera_<object>_<property> (chimera_index_dim). new/free are for
 *     in-memory objects, open/close for mapped files, read/write for whole files.
 *   - Enums are typed (chimera_impute, chimera_probe, chimera_backend) and each has
 *     chimera_<enum>_name() and chimera_<enum>_parse() for front ends; their values are
 *     stored in index profiles, so they are never renumbered.
 *
 * How the API grows without breaking callers
 *   - Options structs (chimera_*_opts, chimera_search_params): a zero field means its
 *     default, and new fields are only ever added at the end, with a default that keeps
 *     today's behaviour. Start from `= {0}` (or a chimera_*_opts_default() initialiser,
 *     which is the same) and set what you need: the code keeps compiling and meaning the
 *     same when fields are added. chimera_search_params_default is not such an
 *     initialiser: it fills in the library's fixed values, which then override the
 *     index's calibrated ones.
 *   - Statuses are never renumbered or reused; new ones may appear, so treat an unknown
 *     negative value as an error.
 *   - The header (CHIMERA_VERSION_*) and the library (chimera_version()) carry
 *     versions. A struct that grows changes the ABI, so it comes with a new soname
 *     (libchimera.so.0 → .1); within a soname, programs built against an older header
 *     keep working.
 */
#ifndef CHIMERA_H
#define CHIMERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public functions: the shared library exports these and nothing else (it is
 * built with -fvisibility=hidden; tests/check_exports.sh compares its dynamic symbols
 * with this header). Define CHIMERA_API before including this header to override. */
#ifndef CHIMERA_API
#if defined(__GNUC__) || defined(__clang__)
#define CHIMERA_API __attribute__((visibility("default")))
#else
#define CHIMERA_API
#endif
#endif

#define CHIMERA_VERSION_MAJOR 0
#define CHIMERA_VERSION_MINOR 14
#define CHIMERA_VERSION_PATCH 1
#define CHIMERA_VERSION_STRING "0.14.1"

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
    CHIMERA_ERR_CANCELLED = -12,  /* the caller's cancel callback asked to stop */
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
CHIMERA_API const char *chimera_status_str(chimera_status status);

/* "MAJOR.MINOR.PATCH" of the library actually linked (CHIMERA_VERSION_STRING is the
 * header's). */
CHIMERA_API const char *chimera_version(void);

/* The SIMD level of the kernels in use: "scalar", "avx2" or "avx512" — the best this
 * CPU (and its OS) supports, capped by CHIMERA_SIMD=scalar|avx2|avx512 in the
 * environment, decided once per process. Static string; never fails. */
CHIMERA_API const char *chimera_simd_level(void);

/* Progress callback for long work: `phase` names the step ("kmeans", "exact search"),
 * `fraction` runs from 0 to 1 (1 once per phase, at its end). May be called from
 * worker threads, so it must be thread-safe. */
typedef void (*chimera_progress_fn)(void *user, const char *phase, double fraction);

/* Cancel callback for long work (the `cancel` field of chimera_build_opts and
 * chimera_exact_opts): polled at the same points as progress (about 200 times per
 * phase, whether or not a progress callback is set) and between stages; a non-zero
 * return asks the call to stop, and it then returns CHIMERA_ERR_CANCELLED soon after,
 * having left no trace (a build leaves no temporary files, and the index previously at
 * its path untouched). Once it has returned non-zero it is not called again in that
 * call. May be called from worker threads, so it must be thread-safe, and it should be
 * cheap (read a flag).
 * Why a separate callback rather than a progress callback returning int: changing
 * chimera_progress_fn's return type would stop every caller's source from compiling and
 * make programs built against the older header (whose callbacks return void) stop at
 * random; a field added at the end of the options structs keeps both meaning what they
 * meant (zero: never cancelled), as the rules above require, and lets a caller cancel
 * without asking for progress. */
typedef int (*chimera_cancel_fn)(void *user);

/* ---------------------------------------------------------------------------------- */
/* Enums                                                                              */
/* ---------------------------------------------------------------------------------- */

/* Each enum has chimera_<enum>_name(value), a static lower-case name ("graph"), NULL for
 * a value outside the enum, and chimera_<enum>_parse(name, &value), the inverse:
 * CHIMERA_OK, or CHIMERA_ERR_INVALID_ARG (value untouched) for an unknown or NULL name.
 * Values are stored in index profiles and never renumbered; 0 is the default. */

/* Refinement's floor for a query token no probed cluster scored (search_params.impute). */
typedef enum chimera_impute {
    CHIMERA_IMPUTE_PROBE = 0, /* "probe": the n_probe-th centroid score (default) */
    CHIMERA_IMPUTE_ZERO = 1,  /* "zero": 0, as a plain partial sum would */
    CHIMERA_IMPUTE_MIN = 2,   /* "min": the smallest estimate seen for that token */
} chimera_impute;

/* How the clusters to probe are found (search_params.probe). */
typedef enum chimera_probe {
    CHIMERA_PROBE_AUTO = 0,  /* "auto": the backend's choice (default) */
    CHIMERA_PROBE_BRUTE = 1, /* "brute": exact top n_probe of all centroid scores */
    CHIMERA_PROBE_GRAPH = 2, /* "graph": a walk of the centroid proximity graph */
} chimera_probe;

/* Where the search pipeline runs (search_opts.backend). */
typedef enum chimera_backend {
    CHIMERA_BACKEND_AUTO = 0, /* "auto": CUDA when a device is usable, else the CPU */
    CHIMERA_BACKEND_CPU = 1,  /* "cpu" */
    CHIMERA_BACKEND_CUDA = 2, /* "cuda": fails with CHIMERA_ERR_DEVICE without a device */
} chimera_backend;

/* The exact re-rank tier (chimera_build_opts.rerank): whether the index keeps the
 * original token vectors, and in which element type. Since 0.4.0. */
typedef enum chimera_rerank {
    CHIMERA_RERANK_NONE = 0, /* "none": codes only (default) */
    CHIMERA_RERANK_F16 = 1,  /* "f16": IEEE half, 2 bytes per dimension */
    CHIMERA_RERANK_BF16 = 2, /* "bf16": bfloat16, 2 bytes (8 bits of mantissa: coarser),
                                scored against the query rounded to bfloat16; on CPUs
                                with AVX-512 BF16 the fastest tier (bench/RESULTS.md
                                section 5.17) */
    CHIMERA_RERANK_F32 = 3,  /* "f32": the vectors as given, 4 bytes */
} chimera_rerank;

CHIMERA_API const char *chimera_impute_name(chimera_impute impute);
CHIMERA_API chimera_status chimera_impute_parse(const char *name, chimera_impute *out);
CHIMERA_API const char *chimera_probe_name(chimera_probe probe);
CHIMERA_API chimera_status chimera_probe_parse(const char *name, chimera_probe *out);
CHIMERA_API const char *chimera_backend_name(chimera_backend backend);
CHIMERA_API chimera_status chimera_backend_parse(const char *name, chimera_backend *out);
CHIMERA_API const char *chimera_rerank_name(chimera_rerank rerank);
CHIMERA_API chimera_status chimera_rerank_parse(const char *name, chimera_rerank *out);

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
    int blas_threads_kept;     /* 1: CHIMERA_BLAS_THREADS=keep, OpenBLAS's thread count is
                                  left alone; 0: set to 1 at the first multiply */
} chimera_runtime_info;

/* Fills *info (probes for CUDA devices, which may take a moment). Never fails. */
CHIMERA_API void chimera_runtime_info_get(chimera_runtime_info *info);

/* NULL when the BLAS kernels in use suit this CPU or the user has set
 * OPENBLAS_CORETYPE; otherwise the OPENBLAS_CORETYPE value ("SkylakeX", "Haswell")
 * that would replace a generic fallback (Debian 12's OpenBLAS runs SSE3 kernels on CPUs
 * it does not know, 3-6x slower). It only takes effect in a process started with it:
 * the CLI re-executes itself with the variable set. */
CHIMERA_API const char *chimera_blas_suggested_coretype(void);

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
CHIMERA_API size_t chimera_mapping_describe(const void *addr, char *buf, size_t n);

/* ---------------------------------------------------------------------------------- */
/* Corpus: the document token vectors                                                 */
/* ---------------------------------------------------------------------------------- */

/* A token matrix [n_tokens, dim] with document lengths [n_docs] (documents are
 * consecutive runs of rows) and optional user ids. Read-only once opened. */
typedef struct chimera_corpus chimera_corpus;

typedef struct chimera_corpus_opts {
    int allow_empty;      /* 1: accept zero-length documents (they are never returned) */
    int skip_value_check; /* 1: do not scan tokens for NaN/Inf at open (exact search then
                             never returns a document whose score is not finite) */
} chimera_corpus_opts;

/* Sets *opts to the defaults (every field 0). */
CHIMERA_API void chimera_corpus_opts_default(chimera_corpus_opts *opts);

/* Maps `tokens_npy` (float32 or float16, [n_tokens, dim], C order) and reads
 * `doclens_npy` (int32 or int64, [n_docs]). `ids_path` (may be NULL) gives user ids:
 * an int64 .npy of n_docs entries, or a text file with one integer per line; without
 * it a document's id is its row in doclens. Checks shapes, that the lengths sum to
 * n_tokens, that no document is empty (unless allowed), that ids are unique, and (unless
 * skipped) that every token is finite; every error names the file and the row.
 * @return CHIMERA_OK, _IO, _FORMAT, _UNSUPPORTED, _DIM, _VALUE, _EMPTY or _NOMEM.
 * @note The token matrix stays memory-mapped, never copied: it may exceed RAM. */
CHIMERA_API chimera_status chimera_corpus_open(const char *tokens_npy, const char *doclens_npy,
                                               const char *ids_path,
                                               const chimera_corpus_opts *opts,
                                               chimera_corpus **out, chimera_error *err);

/* Wraps caller memory (float32 tokens, int64 doclens, optional int64 ids) with the same
 * checks as chimera_corpus_open. @note Nothing is copied: the arrays must outlive the
 * corpus. */
CHIMERA_API chimera_status chimera_corpus_wrap(const float *tokens, int64_t n_tokens, uint32_t dim,
                                               const int64_t *doclens, int64_t n_docs,
                                               const int64_t *ids, const chimera_corpus_opts *opts,
                                               chimera_corpus **out, chimera_error *err);

CHIMERA_API int64_t chimera_corpus_n_docs(const chimera_corpus *corpus);
CHIMERA_API int64_t chimera_corpus_n_tokens(const chimera_corpus *corpus);
CHIMERA_API uint32_t chimera_corpus_dim(const chimera_corpus *corpus);
/* Unmaps and frees the corpus (NULL is a no-op); no call may be in flight on it. An index
 * built from it does not need it. */
CHIMERA_API void chimera_corpus_close(chimera_corpus *corpus);

/* ---------------------------------------------------------------------------------- */
/* Queries                                                                            */
/* ---------------------------------------------------------------------------------- */

/* Query token sets, in memory (immutable once made). */
typedef struct chimera_queries chimera_queries;

/* Reads queries: either [n_queries, m, dim] (every query has m tokens) or [total, dim]
 * with `qlens_npy` giving each query's token count (int32/int64). float32 or float16.
 * Empty queries and NaN/Inf are errors naming the query. The tokens are copied into
 * memory (the file is not kept open).
 * @return CHIMERA_OK, _IO, _FORMAT, _UNSUPPORTED, _DIM, _VALUE, _EMPTY or _NOMEM. */
CHIMERA_API chimera_status chimera_queries_read(const char *queries_npy, const char *qlens_npy,
                                                chimera_queries **out, chimera_error *err);

/* Copies caller memory: `tokens` holds all query tokens back to back; `qlens` gives
 * each query's length, or is NULL when all have `m` tokens. */
CHIMERA_API chimera_status chimera_queries_new(const float *tokens, int64_t n_queries, uint32_t dim,
                                               const int64_t *qlens, uint32_t m,
                                               chimera_queries **out, chimera_error *err);

CHIMERA_API int64_t chimera_queries_count(const chimera_queries *queries);
CHIMERA_API uint32_t chimera_queries_dim(const chimera_queries *queries);
/* A new query set holding queries [start, start + count) of q (copied). */
CHIMERA_API chimera_status chimera_queries_slice(const chimera_queries *q, int64_t start,
                                                 int64_t count, chimera_queries **out,
                                                 chimera_error *err);

/* Number of tokens of query i (0 <= i < count). */
CHIMERA_API uint32_t chimera_queries_len(const chimera_queries *queries, int64_t i);
/* Since 0.5.0: the tokens of query i (chimera_queries_len(i) x dim float32, owned by the
 * set; the queries' tokens are stored back to back, so query 0's pointer reaches all of
 * them); NULL for i outside 0..count-1. For sending queries elsewhere (chimera-mpi). */
CHIMERA_API const float *chimera_queries_tokens(const chimera_queries *queries, int64_t i);
CHIMERA_API void chimera_queries_free(chimera_queries *queries);

/* ---------------------------------------------------------------------------------- */
/* Exact search (ground truth)                                                        */
/* ---------------------------------------------------------------------------------- */

typedef struct chimera_exact_opts {
    int n_threads;               /* 0: one per CPU */
    chimera_progress_fn progress; /* optional */
    void *progress_user;
    chimera_cancel_fn cancel;    /* optional: non-zero stops the search (_CANCELLED) */
    void *cancel_user;
} chimera_exact_opts;

/* Sets *opts to the defaults (every field 0). */
CHIMERA_API void chimera_exact_opts_default(chimera_exact_opts *opts);

/* Exact Chamfer top-k of every query over the whole corpus, by blocked sgemm over the
 * (memory-mapped) token matrix: ids[i*k + r] and scores[i*k + r] are query i's r-th best
 * document (user id) and its score, best first; ties go to the earlier document.
 * Thread-safe: any number of threads may search one corpus at once (each call has its
 * own threads and scratch; the corpus is only read).
 * @param err  optional; receives this call's error (code and message)
 * @return CHIMERA_OK, _INVALID_ARG (k == 0), _DIM (query dim differs), _NOMEM, _VALUE
 *         (a float16 token overflows), _CANCELLED (opts->cancel asked to stop; ids and
 *         scores are then unspecified). */
CHIMERA_API chimera_status chimera_corpus_search(const chimera_corpus *corpus,
                                                 const chimera_queries *queries, uint32_t k,
                                                 const chimera_exact_opts *opts, int64_t *ids,
                                                 float *scores, chimera_error *err);

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
    chimera_cancel_fn cancel; /* optional: non-zero stops the build (_CANCELLED); see
                                 chimera_cancel_fn */
    void *cancel_user;
    /* Since 0.4.0: also store the original token vectors (NONE: not), in the index's
     * document order, as host-only sections that are mapped, never uploaded to a device:
     * what chimera_search_params.rerank_depth re-scores exactly. Costs dim x 2 (F16,
     * BF16) or 4 (F32) bytes per token on disk, several times the codes at B = 4.
     * Adds, updates and compactions keep them; compact --recluster rebuilds from them
     * (losing nothing to the codes). */
    chimera_rerank rerank;
    int no_calibrate;       /* 1: skip the calibration of the index's default search
                               parameters (searches then use the library's fixed
                               defaults); for scratch indexes and tests */
    /* Since 0.5.0: build with these centroids and this codebook's seed (which then
     * replaces `seed`) instead of training (see "Shards" below); NULL: train. n_clusters
     * must be 0 or the codebook's. */
    const struct chimera_codebook *codebook;
} chimera_build_opts;

/* Sets *opts to the defaults (every field 0). */
CHIMERA_API void chimera_build_opts_default(chimera_build_opts *opts);

#define CHIMERA_MAX_PHASES 8

/* One calibrated default (chimera_index_build): the search setting an index uses for a
 * top-k search whose parameters are left at zero, and what it measured. The fields are
 * those of chimera_search_params (impute and probe stay at their defaults). */
typedef struct chimera_calibration {
    uint32_t k;             /* calibrated for this k (10 and 100; smaller indexes: fewer) */
    uint32_t n_probe, k_refine, k_fullbit, chunks;
    double recall;          /* mean Recall@k on the held-out pseudo-queries */
    double recall_low;      /* the lower bound of its 95% confidence interval */
    int reached;            /* 1: recall_low >= the target (0.95); 0: the index's bits cap
                               recall below it and this is the best setting found */
    uint32_t k_interaction; /* since 0.6.0 (0: off) */
    float impute_scale;     /* since 0.7.0: the probe floor's scale it chose (0: none, 1) */
} chimera_calibration;

#define CHIMERA_MAX_CALIBRATED 4

typedef struct chimera_build_report {
    int n_phases;
    const char *phase[CHIMERA_MAX_PHASES]; /* "sample", "kmeans", "assign", ... (static) */
    double seconds[CHIMERA_MAX_PHASES];
    double total_seconds;
    uint64_t peak_rss_bytes;
    uint32_t n_clusters;
    double assign_recall;   /* fraction of tokens given their exact nearest centroid */
    uint64_t index_bytes;   /* bytes of all sections */
    /* Since 0.4.0: the calibration of the default search parameters (also the phase
     * "calibrate"); n_calibrated is 0 when it was skipped or the index is too small */
    double calibrate_target; /* the Recall@k the defaults were chosen for (0.95) */
    int n_calibrated;
    chimera_calibration calibrated[CHIMERA_MAX_CALIBRATED];
} chimera_build_report;

/* Builds an index of `corpus` into directory `dir` (its parent must exist). The build
 * writes into a temporary directory beside `dir` and swaps it in only when complete and
 * synced, so an existing index at `dir` is never damaged by a failed or killed build;
 * a non-index directory at `dir` is refused. report (may be NULL) gets per-phase times.
 *
 * Calibration (unless opts->no_calibrate): before the commit, the build chooses the
 * index's own default search parameters for k = 10 and k = 100 (each where it is at most
 * a fifth of the non-empty documents), so that a search with zero parameters reaches
 * Recall@k >= 0.95 on this corpus, not only on the corpora the library's fixed defaults
 * were measured on. It samples realistic pseudo-queries (chimera_corpus_sample_queries
 * with m = 0), takes as truth the exact Chamfer top-k among the candidates of a
 * generous search (exact scores of the corpus's own vectors; since 0.12.1 that search
 * refines a fifteenth of the documents, at least 1,200 and at most 4,000, for the
 * k = 100 queries: on a corpus of 60,000 documents k_refine 1,200 missed 1.8% of the
 * true top 100, which deeper settings then found and were counted wrong for; since
 * 0.12.2, on a corpus small enough that an exact pass over it costs about what that
 * search does, at most 1.7e10 multiply-adds, the truth is exact search's top k; since
 * 0.12.4, up to three times that, exact search's for the k = 100 held-out queries), picks
 * the probe floor's scale for each k (impute_scale; since 0.12.3 per k, and every trial
 * and check of that k runs at it: before, they ran at 1 while the scale picked was
 * stored, so the reported recall was another setting's), walks up from half the fixed
 * defaults (since 0.8.1 with k_refine = k_fullbit: every refined document full-bit
 * scored, no 1-bit pass, usually the faster form on the CPU, bench/RESULTS.md 5.19; a
 * query with a filter still refines 4 k_fullbit and re-scores 2 k_fullbit of them by
 * their 1-bit scores) on a third of the queries (a sixth for k = 100), raising n_probe
 * or k_fullbit by the recall each gains per unit of a cost model of the search's own
 * counts (posting entries, documents scored: the same choice on every build, unlike
 * timings), and keeps the
 * cheapest setting measured only when the lower bound of the 95% interval of its recall
 * on the held-out queries (two thirds; a third for k = 100) meets 0.95, raising the
 * walk's target otherwise; where the index's bits (or the interval's width) do not allow
 * it, the best setting found is kept with reached = 0. It costs 96 to 480
 * pseudo-queries' searches (phase "calibrate": 1.5-11 s on two cores; bench/RESULTS.md
 * section 5.32 measures 6-26% of the build on 0.45-1.65M-token corpora and 42-52% on
 * 0.13-0.23M-token ones, whose builds take 2-3.5 s; the count grows with the tokens up
 * to 9.6M, since 0.14.1, and section 5.36 measures 5% at 10^7).
 * The defaults are stored in the manifest, survive add and delete, and are no longer
 * used once a fifth of the documents changed (like tuned profiles);
 * chimera_index_info_read reports them.
 * A corpus opened from files (chimera_corpus_open) is also recorded as the index's
 * source: its paths, sizes and modification times (chimera_index_source_open).
 * @return CHIMERA_OK, _INVALID_ARG, _IO, _NOMEM, _CANCELLED (opts->cancel asked to
 *         stop: the temporary directory is removed and `dir` is as it was); message in
 *         err. */
CHIMERA_API chimera_status chimera_index_build(const chimera_corpus *corpus, const char *dir,
                                               const chimera_build_opts *opts,
                                               chimera_build_report *report, chimera_error *err);

/* ---------------------------------------------------------------------------------- */
/* Shards: one corpus over several indexes (since 0.5.0)                               */
/* ---------------------------------------------------------------------------------- */

/* A corpus too large for one index (2^32 tokens), one machine's memory or one device is
 * split into shards of whole documents, each an ordinary index. For their scores to be
 * comparable, so that the global top k is the merge of the shards' top k, they share
 * one codebook: the IVF centroids (and the coarse level that assigns tokens to them)
 * and the seed the RaBitQ rotation derives from. Every shard then assigns, encodes and
 * scores a token exactly as one index of the whole corpus built with that codebook
 * would: with exhaustive search parameters the merged results equal that index's.
 *
 * Making one: chimera_codebook_train on the whole corpus (or on a sample gathered from
 * where the shards live: chimera_corpus_sample_tokens, chimera_codebook_train_points;
 * or refined by distributed Lloyd steps: chimera_codebook_accumulate on each part,
 * sums and counts added up, chimera_codebook_update), then chimera_index_build of each
 * shard (chimera_corpus_slice) with build_opts.codebook. chimera_codebook_to_bytes and
 * _from_bytes move it between processes; _save and _load keep it in a file.
 *
 * chimera_codebook: made by _train, _train_points, _from_bytes or _load; immutable but
 * for chimera_codebook_update; any number of builds may use one at once (they copy
 * it); freed by chimera_codebook_free. */
typedef struct chimera_codebook chimera_codebook;

/* A view of documents [doc_start, doc_start + n_docs) of `corpus`: no copy (the corpus
 * must outlive it); every document keeps its id in the corpus (its row in doclens when
 * the corpus has no ids), so shards built from slices return the corpus's ids.
 * check_values = 1 scans the slice's tokens for NaN/Inf (for a corpus opened with
 * skip_value_check, so that each process checks only its own part).
 * @return CHIMERA_OK, _INVALID_ARG (the range is outside the corpus, or empty), _VALUE,
 *         _NOMEM. */
CHIMERA_API chimera_status chimera_corpus_slice(const chimera_corpus *corpus, int64_t doc_start,
                                                int64_t n_docs, int check_values,
                                                chimera_corpus **out, chimera_error *err);

/* The first token row of document doc of the corpus (doc = n_docs: n_tokens); -1 for a
 * doc outside 0..n_docs. Lets a caller cut shards balanced by tokens. */
CHIMERA_API int64_t chimera_corpus_doc_start(const chimera_corpus *corpus, int64_t doc);

/* The number of IVF clusters a build chooses for n_tokens (build_opts.n_clusters = 0),
 * and the size of the training sample it draws for k clusters over n_tokens. */
CHIMERA_API uint32_t chimera_default_n_clusters(int64_t n_tokens);
CHIMERA_API int64_t chimera_codebook_sample_size(uint32_t n_clusters, int64_t n_tokens);

/* Draws n token rows of the corpus uniformly without replacement, in row order, into
 * out [n x dim] (float32): with stream = 0 and the build's seed, the very rows
 * chimera_index_build trains on; other streams give independent draws (one per process).
 * @return CHIMERA_OK, _INVALID_ARG (n outside 0..n_tokens), _NOMEM. */
CHIMERA_API chimera_status chimera_corpus_sample_tokens(const chimera_corpus *corpus, int64_t n,
                                                        uint64_t seed, uint64_t stream, float *out,
                                                        chimera_error *err);

/* Trains the codebook chimera_index_build would train on this corpus with these
 * options (bits, rerank and calibration do not matter; n_clusters, seed, threads,
 * progress and cancel do): an index built with it equals one built without.
 * @return CHIMERA_OK, _INVALID_ARG, _NOMEM, _CANCELLED. */
CHIMERA_API chimera_status chimera_codebook_train(const chimera_corpus *corpus,
                                                  const chimera_build_opts *opts,
                                                  chimera_codebook **out, chimera_error *err);

/* Trains n_clusters centroids (0: chimera_default_n_clusters(n_tokens_total)) on
 * points [n x dim] (rows should be unit vectors, like the corpus) with the build's
 * k-means; the seed, threads, progress and cancel come from opts (may be NULL).
 * @return CHIMERA_OK, _INVALID_ARG (fewer points than clusters), _VALUE (NaN/Inf),
 *         _NOMEM, _CANCELLED. */
CHIMERA_API chimera_status chimera_codebook_train_points(const float *points, int64_t n,
                                                         uint32_t dim, uint32_t n_clusters,
                                                         int64_t n_tokens_total,
                                                         const chimera_build_opts *opts,
                                                         chimera_codebook **out,
                                                         chimera_error *err);

/* One Lloyd step in two halves, for training over points spread across processes:
 * _accumulate assigns points [n x dim] to their nearest centroid (as a build assigns
 * tokens) and adds each to its centroid's sum (sums: [n_clusters x dim], zeroed by the
 * caller) and count (counts: [n_clusters]); *similarity (may be NULL) accumulates their
 * inner products with their centroids. Add the arrays of all parts, then _update sets
 * every centroid with members to the normalised sum of them (the others stay) and
 * returns how many stayed. n_threads: 0 = all CPUs.
 * @return (accumulate) CHIMERA_OK, _INVALID_ARG, _NOMEM. */
CHIMERA_API chimera_status chimera_codebook_accumulate(const chimera_codebook *cb,
                                                       const float *points, int64_t n,
                                                       int n_threads, double *sums,
                                                       int64_t *counts, double *similarity,
                                                       chimera_error *err);
CHIMERA_API uint32_t chimera_codebook_update(chimera_codebook *cb, const double *sums,
                                             const int64_t *counts);

CHIMERA_API uint32_t chimera_codebook_n_clusters(const chimera_codebook *cb);
CHIMERA_API uint32_t chimera_codebook_dim(const chimera_codebook *cb);
CHIMERA_API uint64_t chimera_codebook_seed(const chimera_codebook *cb);

/* Serialized form (self-checking: magic, shape and checksum). _to_bytes returns a
 * buffer to release with chimera_free. _save writes a file atomically (a temporary
 * file, fsynced and renamed). _from_bytes and _load refuse a truncated, altered or
 * foreign buffer with _FORMAT naming what is wrong.
 * @return CHIMERA_OK, _FORMAT, _VALUE, _IO (file), _NOMEM. */
CHIMERA_API chimera_status chimera_codebook_to_bytes(const chimera_codebook *cb, void **buf,
                                                     size_t *n, chimera_error *err);
CHIMERA_API chimera_status chimera_codebook_from_bytes(const void *buf, size_t n,
                                                       chimera_codebook **out,
                                                       chimera_error *err);
CHIMERA_API chimera_status chimera_codebook_save(const chimera_codebook *cb, const char *path,
                                                 chimera_error *err);
CHIMERA_API chimera_status chimera_codebook_load(const char *path, chimera_codebook **out,
                                                 chimera_error *err);
CHIMERA_API void chimera_codebook_free(chimera_codebook *cb);

/* Releases a buffer the library allocated for the caller (chimera_codebook_to_bytes). */
CHIMERA_API void chimera_free(void *p);

/* ---------------------------------------------------------------------------------- */
/* Changing an index: add, delete, update, compact                                     */
/* ---------------------------------------------------------------------------------- */

/* Options of chimera_index_add, _delete, _update and _compact; zero means default. */
typedef struct chimera_update_opts {
    int missing_ok;         /* delete: ids not in the index are skipped (counted in the
                               report) instead of failing the call; update: they are
                               added */
    int no_sync;            /* 1: skip fsyncs (scratch indexes, tests): the change is
                               still atomic, but a power loss may lose it */
    int lock_timeout_ms;    /* wait for another writer of the index: 0 = 30 s, < 0 = not
                               at all (CHIMERA_ERR_BUSY at once) */
    chimera_progress_fn progress; /* optional (compact) */
    void *progress_user;
    /* compact only: */
    int recluster;          /* 1: retrain the centroids over the live documents and rebuild
                               from their stored vectors (chimera_build_opts.rerank), or
                               else from tokens reconstructed from their full-bit codes
                               (when chimera_index_info advises it: drift), and
                               calibrates the default search parameters again on them
                               (as chimera_index_build does); 0: keep them */
    uint32_t n_clusters;    /* recluster: 0 = the build's default for the live tokens */
    int n_threads;          /* add, update, recluster: threads (0 = all CPUs) */
    uint64_t seed;          /* recluster: k-means seed */
    chimera_cancel_fn cancel; /* optional: non-zero stops the change before its commit
                                 (CHIMERA_ERR_CANCELLED; the index is as it was) */
    void *cancel_user;
    const char *metadata;   /* add, update: a JSON Lines file of the documents' metadata
                               records ({"id": ..., fields}), stored with them in the same
                               commit (chimera_index_meta_import says how it is kept) */
    int filter_timeout_ms;  /* delete_where: the filter's running time limit, as
                               chimera_filter_sql's timeout_ms (0 = 2 s) */
} chimera_update_opts;

/* Sets *opts to the defaults (every field 0). */
CHIMERA_API void chimera_update_opts_default(chimera_update_opts *opts);

/* What a change did and cost. */
typedef struct chimera_update_report {
    int64_t docs_added, tokens_added;
    int64_t docs_deleted;   /* by delete, by update (the replaced versions), or dropped by
                               compact */
    int64_t ids_missing;    /* with missing_ok: ids skipped (delete) or added (update) */
    uint64_t generation;    /* the index's generation after the call */
    double seconds, assign_seconds, encode_seconds, write_seconds;
    double drift_below;     /* added tokens whose similarity to their centroid is below
                               the build's 10th percentile, as a fraction (about 0.10
                               when the new documents resemble the old; -1: unknown) */
    int merged;             /* 1: the commit also merged appended segments or deletion
                               lists (update.h); compact: 1 when it rewrote the index */
    int64_t n_docs, n_deleted; /* of the index after the call (deleted included in n_docs) */
    uint32_t n_segments;
    uint64_t peak_rss_bytes;
    double assign_recall;   /* add, update: the fraction of added tokens given their exact
                               nearest centroid, on a sample (1 below 4096 clusters, where
                               assignment is exact) */
    int64_t meta_records;   /* metadata records imported or upserted */
    int meta_repaired;      /* metadata changes replayed because an earlier change was
                               interrupted between the index's commit and the database's */
} chimera_update_report;

/* Appends the documents of `docs` to the index at `dir` without rebuilding it: their
 * tokens are assigned to the index's centroids, quantized, and written as a new
 * segment that searches see exactly as built documents (the same pipeline and
 * parameters). `docs` must carry ids (chimera_corpus_open's ids file or _wrap's ids),
 * none of them already in the index; ids stay the documents' names for life (a delete
 * never renumbers). One atomic commit under the index's writer lock: when the call
 * returns CHIMERA_OK the change is on disk (fsynced); before that, or on any error, the
 * index is exactly as it was. Handles opened earlier keep their view until
 * chimera_index_refresh.
 * @return CHIMERA_OK; _INVALID_ARG (no ids, an id already in the index, named; too many
 *         documents or tokens in all), _DIM (the documents' dimension is not the
 *         index's), _IO (a full disk: nothing changed), _BUSY (another writer held the
 *         lock past the timeout), _VERSION / _CORRUPT (the index), _NOMEM. */
CHIMERA_API chimera_status chimera_index_add(const char *dir, const chimera_corpus *docs,
                                             const chimera_update_opts *opts,
                                             chimera_update_report *report, chimera_error *err);

/* Imports document metadata for filtering (chimera_filter_sql): one record per document,
 * keyed by its id, from a JSON Lines file ({"id": 7, "year": 2021, "lang": "en"} per line)
 * or, with csv, a CSV file with a header row naming the fields (one of them "id").
 * Columns are typed from the data (INTEGER, REAL or TEXT). The records replace the
 * metadata the index had, in an SQLite database inside the index directory
 * (IDX/meta.sqlite), in one commit with the index: the file is also stored in the index,
 * so that a crash between the two commits is repaired by the next change. Deletes remove
 * their documents' records in the same commit, and add/update bring theirs
 * (chimera_update_opts.metadata). A malformed line fails the import naming file:line,
 * and nothing is imported.
 * @return CHIMERA_OK; _FORMAT (a malformed record); the statuses of chimera_index_add. */
CHIMERA_API chimera_status chimera_index_meta_import(const char *dir, const char *path, int csv,
                                                     const chimera_update_opts *opts,
                                                     chimera_update_report *report,
                                                     chimera_error *err);

/* Reads document ids from an integer .npy file ([n], int32 or int64) or a text file of
 * one integer per line into *ids (n entries; free it with chimera_ids_free).
 * @return CHIMERA_OK, _IO, _FORMAT (names the line or what the .npy holds), _NOMEM. */
CHIMERA_API chimera_status chimera_ids_read(const char *path, int64_t **ids, int64_t *n,
                                            chimera_error *err);
CHIMERA_API void chimera_ids_free(int64_t *ids);

/* Deletes the documents with ids[0..n) (an id listed twice counts once): one commit
 * that writes the documents' numbers as a deletion list, costing O(n), not a pass over
 * the index. Deleted documents never appear in a search of a handle opened (or
 * refreshed) after the call returns. Their space is reclaimed by chimera_index_compact.
 * @return CHIMERA_OK; _INVALID_ARG (a negative id, or one not in the index, named,
 *         unless opts->missing_ok); the statuses of chimera_index_add. */
CHIMERA_API chimera_status chimera_index_delete(const char *dir, const int64_t *ids, int64_t n,
                                                const chimera_update_opts *opts,
                                                chimera_update_report *report,
                                                chimera_error *err);

/* Deletes the documents whose metadata satisfies `filter` (an SQL expression over their
 * records with n_args '?' arguments, as chimera_filter_sql takes it). The filter is
 * evaluated under the writer lock, on the records of the state the delete commits
 * against: a document another writer adds or updates in between is judged by what it
 * is at the commit, never by what it was. Matching records of ids not in the index
 * (imported for documents never added) are counted in report->ids_missing and kept;
 * nothing matched: CHIMERA_OK without a commit. The filter runs for at most
 * opts->filter_timeout_ms (0: 2 s) while it holds the writer lock.
 * @return CHIMERA_OK; _INVALID_ARG (the index has no metadata; the filter's errors, as
 *         chimera_filter_sql's); _CANCELLED (the filter's time limit passed: nothing
 *         changed; a larger filter_timeout_ms lets it finish); the statuses of
 *         chimera_index_add. */
CHIMERA_API chimera_status chimera_index_delete_where(const char *dir, const char *filter,
                                                      const char *const *args, int n_args,
                                                      const chimera_update_opts *opts,
                                                      chimera_update_report *report,
                                                      chimera_error *err);

/* Replaces documents: every id of `docs` must be in the index (or, with missing_ok, is
 * added); the old versions are deleted and the new ones appended in one commit, so a
 * search sees either all the old versions or all the new ones.
 * @return as chimera_index_add; _INVALID_ARG names an id that is not in the index. */
CHIMERA_API chimera_status chimera_index_update(const char *dir, const chimera_corpus *docs,
                                                const chimera_update_opts *opts,
                                                chimera_update_report *report,
                                                chimera_error *err);

/* Rewrites the index as a single segment without its deleted documents, nothing
 * re-quantized (ids kept; stored vectors, chimera_build_opts.rerank, kept with their
 * documents). With opts->recluster, the centroids are retrained over the live documents
 * and the index rebuilt from their stored vectors when it has them (exactly as a build
 * from the original vectors, stored vectors kept), else from tokens reconstructed from
 * their full-bit codes (which loses what the codes lost; rebuilding from the original
 * vectors, if you have them, is better): the build runs without the writer lock and commits only if the index did
 * not change meanwhile (CHIMERA_ERR_CONFLICT otherwise; run it again). Memory: dim
 * floats per live token. Written beside the index and swapped in atomically like a
 * build; readers keep their view. Advised when more than ~20% of the documents are
 * deleted (chimera_index_info's n_deleted) or after many small adds. An index with one
 * segment and nothing deleted is left as it is (CHIMERA_OK, generation unchanged).
 * @return CHIMERA_OK; _EMPTY (every document is deleted); the statuses of
 *         chimera_index_add. */
CHIMERA_API chimera_status chimera_index_compact(const char *dir, const chimera_update_opts *opts,
                                                 chimera_update_report *report,
                                                 chimera_error *err);

typedef struct chimera_open_opts {
    int verify;             /* 1: recompute every section's payload checksum before
                               returning (reads all the data once; `chimera search
                               --verify`). Catches damage such as flipped bits; content
                               that is wrong but consistently checksummed is what
                               chimera_index_check finds. */
} chimera_open_opts;

/* Sets *opts to the defaults (every field 0). */
CHIMERA_API void chimera_open_opts_default(chimera_open_opts *opts);

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
CHIMERA_API chimera_status chimera_index_open(const char *dir, const chimera_open_opts *opts,
                                              chimera_index **out, chimera_error *err);
/* Unmaps and frees the index and whatever search state it holds (worker threads, device
 * memory) and its pooled search sessions; NULL is a no-op. No call may be in flight on it. */
CHIMERA_API void chimera_index_close(chimera_index *index);

/* Moves the handle to the newest committed generation of its directory (after an add,
 * delete, update, compact or rebuild by this or another process), if there is one.
 * Searches running meanwhile finish on the generation they started with; later ones
 * use the new one. Safe to call while other threads search. *changed (may be NULL):
 * 1 when the handle moved. On error the handle keeps its generation.
 * @return CHIMERA_OK; the statuses of chimera_index_open. */
CHIMERA_API chimera_status chimera_index_refresh(chimera_index *index, int *changed,
                                                 chimera_error *err);

/* The generation the handle sees (chimera_index_info's generation at open or refresh). */
CHIMERA_API uint64_t chimera_index_generation(const chimera_index *index);

/* The deep consistency check (`chimera check`): every checksum, then every token in
 * exactly one posting list, lists consistent with documents and centroids, the two
 * copies of the 1-bit codes and factors equal, every B-bit code within the index's bits
 * and agreeing with its 1-bit plane, every centroid and factor finite and within the
 * range RaBitQ allows, user ids >= 0 and unique, a valid graph whose every node is
 * reachable. The message (in err, optional) names the section. Thread-safe.
 * @return CHIMERA_OK, _CORRUPT, _EMPTY (a consistent index whose documents are all
 *         deleted: every search would fail with _EMPTY), _NOMEM. */
CHIMERA_API chimera_status chimera_index_check(const chimera_index *index, chimera_error *err);

/* The number of documents a search can return (deleted ones excluded). */
CHIMERA_API int64_t chimera_index_n_docs(const chimera_index *index);

/* The user ids of those documents, in the index's order (the build's order, then each
 * add's): ids[0 .. min(cap, n_docs)). Returns how many there are in all (call with
 * cap = 0 to size the array). */
CHIMERA_API int64_t chimera_index_ids(const chimera_index *index, int64_t *ids, int64_t cap);
CHIMERA_API uint32_t chimera_index_dim(const chimera_index *index);

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
    /* Since 0.3.0: the living index (chimera_index_add and friends) */
    int64_t n_deleted;      /* documents deleted and not yet compacted away */
    uint32_t n_segments;    /* 1 after a build or compaction, + 1 per add since */
    uint32_t n_deletion_lists;
    int64_t appended_docs, appended_tokens; /* in segments after the first */
    double assign_sim_p10;  /* the build's 10th percentile of token-to-centroid similarity
                               (0: not recorded) */
    int64_t drift_tokens;   /* tokens added since the build whose drift was measured */
    double drift_below;     /* the fraction of those below assign_sim_p10 (the build's own
                               is 0.10) */
    int recluster_advised;  /* 1: the appended tokens fit the centroids markedly worse
                               than the built ones and are a large part of the index:
                               retrain them (chimera_index_compact with
                               chimera_update_opts.recluster; keeps ids and metadata,
                               which a new chimera_index_build would not) */
    /* Since 0.4.0: the exact re-rank tier (chimera_build_opts.rerank) */
    chimera_rerank rerank;  /* the element type of the stored vectors; NONE: none */
    uint64_t bytes_rerank;  /* their bytes over all segments (host-only, part of
                               bytes_host) */
    /* Since 0.4.0: the calibrated default search parameters (chimera_index_build) */
    double calibrate_target; /* 0: none stored (built without, or by an older version) */
    int n_calibrated;
    chimera_calibration calibrated[CHIMERA_MAX_CALIBRATED];
    int calibration_stale;  /* 1: a fifth of the documents changed since: searches use
                               the library's fixed defaults until the next build (or
                               compact with recluster, which calibrates again) */
    int has_source;         /* 1: the build recorded the files it read (tune can compute
                               exact truth from them: chimera_index_source_open); 2 (since
                               0.13.0): recorded, but documents were added, deleted or
                               updated since, so source_open refuses it; 0: none */
} chimera_index_info;

CHIMERA_API chimera_status chimera_index_info_read(const char *dir, chimera_index_info *info,
                                                   chimera_error *err);

/* ---------------------------------------------------------------------------------- */
/* Search                                                                             */
/* ---------------------------------------------------------------------------------- */

/* The pipeline's knobs. A zero field means the default: the index's calibrated default
 * for the search's k when it has one (chimera_index_build, chimera_index_params_default),
 * else the library's (chimera_search_params_default). */
typedef struct chimera_search_params {
    uint32_t n_probe;   /* clusters probed per query token */
    uint32_t k_refine;  /* documents kept by 1-bit partial scores (refinement) */
    uint32_t k_fullbit; /* documents re-scored with the full-bit codes (>= k); when it
                           covers the documents refinement kept (always at k_fullbit >=
                           k_refine), every one is, and the 1-bit pass is skipped */
    uint32_t chunks;    /* document-scoring chunks overlapped with re-scoring (1..64) */
    chimera_impute impute; /* refinement floor for unseen tokens (default: PROBE) */
    chimera_probe probe;   /* centroid search (default: the backend's choice) */
    /* Since 0.4.0: the exact re-rank tier; 0: off (default). The top max(k, rerank_depth)
     * documents by full-bit score are re-scored by exact Chamfer over the vectors the
     * index stores (chimera_build_opts.rerank), on the host whatever the backend, and
     * the best k of them are returned with their exact scores (as chimera_corpus_search
     * computes them, within the stored element type's rounding; BF16 vectors are scored
     * against the query rounded to bfloat16 too). k_fullbit is raised to
     * rerank_depth when smaller; when the two are equal the top k_fullbit by 1-bit
     * score are re-scored directly (full-bit scores would pick the same documents, and
     * the exact scores replace them), and when k_refine is no more than that, every
     * refined document is, with no 1-bit pass (bench/RESULTS.md 5.19). An index without the vectors fails the search with
     * CHIMERA_ERR_INVALID_ARG. At most 2^24. */
    uint32_t rerank_depth;
    /* Since 0.6.0: centroid interaction. When below k_refine, refinement's k_refine
     * documents are ranked by a cheap score in which each document token counts as its
     * centroid (sum over query tokens of the best <q_j, c> among the document's tokens'
     * centroids: PLAID's centroid interaction, from scores the probe already computed,
     * no code read), and only the best k_interaction (at least k_fullbit) are 1-bit
     * scored (or, when that is k_fullbit, all re-scored with no 1-bit pass). A
     * k_refine of 8-12 k_fullbit with a k_interaction of 3 k_fullbit reaches Recall@k
     * 0.96-0.98 for up to 1.4-1.8x less time than without; at 0.95 it gains
     * nothing (bench/RESULTS.md 5.9), so calibration leaves it off, and `chimera tune`
     * tries it only on a CUDA device (the backward walk), keeping it where it measured
     * it faster; the CPU's frontier walk leaves it off. 0: the index's
     * calibrated value when k_refine is left to the index too, else off;
     * k_interaction >= k_refine: off. Not applied when a selective filter scores its
     * allowed documents directly. */
    uint32_t k_interaction;
    /* Since 0.7.0: the probe floor's scale (impute PROBE). Refinement counts a query
     * token that none of a document's probed tokens scored at a floor: the n_probe-th
     * centroid score of that token, moved toward zero by (1 - impute_scale) of its size.
     * An unprobed token scores below its cluster's centroid, by an amount that depends on
     * the corpus: the best scale measured 0.55-0.85 on four corpora, where 1 (the score
     * itself) lost up to 0.05 of Recall@10 at the same cost (bench/RESULTS.md 5.12), so
     * the build calibrates it. In (0, 1]; 0: the index's calibrated scale, else 1. */
    float impute_scale;
    /* Since 0.9.0: a target recall, to search with the index's tuned profile for this k
     * and the smallest stored target >= recall (chimera_index_profile_get): every field
     * left 0 takes the profile's value first, then the defaults as usual; fields set
     * win. Its depths count as the index's own, so a query with a filter searches
     * deeper, as with the calibrated defaults (the profile was tuned without one). In
     * (0, 1]; 0: no profile. A search fails with CHIMERA_ERR_EMPTY (message) when the
     * index has no such profile, or the one that qualifies is stale. The profile's
     * k_interaction is taken only with its k_refine (as the calibrated one). */
    double recall;
    /* Since 0.9.0: CHIMERA_CHOSE_IMPUTE / CHIMERA_CHOSE_PROBE: impute / probe were set by
     * the caller. Their zero values (PROBE, AUTO) are choices too, which a profile
     * (recall) would otherwise fill over; front ends set these for what the user gave. */
    uint32_t chosen;
} chimera_search_params;

#define CHIMERA_CHOSE_IMPUTE 1u
#define CHIMERA_CHOSE_PROBE 2u

/* Sets every field of *p that is zero to the library's fixed default for top-k: on a
 * zeroed struct, all the defaults; after setting some fields, the rest. (k == 0 counts
 * as 10.) These were measured on the demo generator's corpus; an index calibrates its
 * own (chimera_index_params_default), which a search uses for the fields left at zero.
 * A search with the fields this function filled in uses these values instead, the
 * index's calibration ignored: pass a zeroed struct to get the index's defaults. */
CHIMERA_API void chimera_search_params_default(uint32_t k, chimera_search_params *p);

/* A search filter: the user ids a search may return, or, with exclude, those it must
 * not. Immutable after creation; one filter may serve any number of searches and
 * indexes at once (it is resolved against each index, and each generation, when used:
 * ids the index does not hold are simply not matched). */
typedef struct chimera_filter chimera_filter;

/* Makes a filter of ids[0..n) (copied; duplicates allowed). exclude = 0: only these ids
 * may be returned; exclude = 1: every document but these.
 * @return CHIMERA_OK, _INVALID_ARG (a negative id, n < 0), _NOMEM. */
CHIMERA_API chimera_status chimera_filter_new(const int64_t *ids, int64_t n, int exclude,
                                              chimera_filter **out, chimera_error *err);
CHIMERA_API void chimera_filter_free(chimera_filter *filter);

/* Since 0.3.0. The ids a filter lists (chimera_filter_new's, or those of the documents a
 * chimera_filter_sql matched) in ids[0 .. min(cap, n)), and whether it excludes them
 * (*exclude may be NULL). Returns n, how many there are in all (call with cap = 0 to
 * size the array); 0 for a NULL filter. Lets a front end act on what a metadata filter
 * selects, e.g. delete those documents. Thread-safe (the filter is immutable). */
CHIMERA_API int64_t chimera_filter_ids(const chimera_filter *filter, int64_t *ids, int64_t cap,
                                       int *exclude);

/* A filter of the documents whose metadata (chimera_index_meta_import) satisfies the SQL
 * expression `expr`, e.g. "year >= ? AND lang = ?" with args {"2020", "en"}: evaluated
 * as SELECT id FROM meta WHERE (expr) on a read-only connection that may read only the
 * metadata table and call only built-in functions such as lower, like, abs, coalesce,
 * json_extract (no statements, ATTACH, PRAGMA, load_extension or writes; no `;` or
 * comments), with its `?` bound to args in order (an argument written as a number is
 * bound as one) and at most timeout_ms of running time (0: 2 s).
 * @return CHIMERA_OK; _INVALID_ARG (a syntax error or a refused operation, named; the
 *         index has no metadata); _CANCELLED (the time limit); _CONFLICT (the metadata is
 *         behind the index after an interrupted change: any change repairs it); _CORRUPT
 *         (the database is older than the index's log reaches, e.g. a copy put back:
 *         chimera_index_meta_import repairs it); _NOMEM. */
CHIMERA_API chimera_status chimera_filter_sql(const chimera_index *index, const char *expr,
                                              const char *const *args, int n_args,
                                              int timeout_ms, chimera_filter **out,
                                              chimera_error *err);

typedef struct chimera_search_opts {
    int n_threads;        /* 0: one per CPU */
    int latency_mode;     /* 1: one query at a time with all threads; 0: queries spread
                             over the threads (throughput) */
    chimera_backend backend; /* where to run (default: AUTO) */
    /* Since 0.3.0. Filters act inside the pipeline (disallowed documents never take a
     * candidate's place), and a selective one switches to scoring its allowed documents
     * directly, so a search returns min(k, allowed) results at any selectivity. */
    const chimera_filter *filter;                /* for every query (NULL: none) */
    const chimera_filter *const *query_filters;  /* [n_queries], query i's filter (NULL
                                                    entries: none); overrides filter */
} chimera_search_opts;

/* Sets *opts to the defaults (every field 0). */
CHIMERA_API void chimera_search_opts_default(chimera_search_opts *opts);

/* What a search measured (sums over its queries). */
typedef struct chimera_search_profile {
    double seconds;             /* wall time of the call */
    double t_generate, t_refine, t_score1, t_fullbit, t_fullbit_wait; /* summed per query */
    uint64_t tokens_refined;    /* posting entries given a 1-bit estimate */
    uint64_t docs_touched;      /* documents seen in refinement (since 0.10.0 in every
                                   round of a probing that widened) */
    uint64_t n_refined;         /* documents kept by refinement */
    uint64_t n_fullbit;         /* documents re-scored at full precision */
    uint64_t bytes_up, bytes_down; /* across the host/device boundary */
    double *latency;            /* optional caller array [n_queries]: seconds per query */
    char backend[16];           /* the backend that ran */
    /* Since 0.4.0 */
    double t_rerank;            /* the exact re-rank (summed per query; 0 when off) */
    uint64_t n_reranked;        /* documents re-scored exactly */
    /* Since 0.6.0 */
    double t_interaction;       /* centroid interaction (summed per query; 0 when off) */
    uint64_t n_scored1;         /* documents 1-bit scored: n_refined, or the
                                   k_interaction best of them; 0 for a query whose
                                   k_fullbit covers them all (none is needed) */
    /* Since 0.9.0 */
    uint64_t n_rows;            /* centroid-score rows (a query's scores against one
                                   centroid) computed for the scored documents' tokens
                                   where probing did not score every centroid: one by
                                   one after a graph probe on the CPU or in a device
                                   backend's host stage, K for a query that switched to
                                   scoring them all; 0 where probing scored them all */
    /* Since 0.10.0 */
    uint64_t n_probed;          /* clusters probed per query token, every round counted:
                                   n_probe, more where probing widened (a filter, or
                                   probed clusters holding fewer documents than
                                   k_fullbit, which probes twice as many and refines
                                   again until they do); 0 for a query that went
                                   straight to a filter's direct path (one that fell
                                   back to it after a filtered refinement counts that
                                   refinement's probes) */
    /* Since 0.11.0 */
    uint64_t n_walked;          /* of n_probed, those a walk of the centroid graph
                                   found (probe=auto walks on large indexes, on the CPU
                                   for queries whose documents' tokens are few next to
                                   the centroids); the rest were selected from scores
                                   against every centroid */
} chimera_search_profile;

/* Sets every field of *p that is zero to the default a search of `index` with this k
 * uses: the index's calibrated setting (chimera_index_build) for the smallest
 * calibrated k >= k (for a k above all of them, the largest, with k_fullbit and
 * k_refine scaled by k over its k), then the library's defaults for whatever is still
 * zero (chimera_search_params_default). Thread-safe.
 * @return 1 when calibrated values were used; 0 when the index has none for this k
 *         (none stored, or stale: a fifth of the documents changed since the build). */
CHIMERA_API int chimera_index_params_default(const chimera_index *index, uint32_t k,
                                             chimera_search_params *p);

/* Since 0.9.0. The setting a search of `index` with top-k and these params (NULL: all
 * defaults) runs, as chimera_index_search resolves it: the fields set, a tuned
 * profile's (params->recall), the calibrated and library defaults, made consistent
 * (k_fullbit >= k and >= rerank_depth, k_refine >= k_fullbit, k_interaction off when
 * >= k_refine, n_probe at most the index's clusters). filtered != 0: the depths of a
 * query with a filter (deeper when they were left to the index or a profile; probing
 * also widens per query with the filter's selectivity, which no setting states).
 * out->recall and out->chosen are params'. Thread-safe.
 * @return CHIMERA_OK, _INVALID_ARG (a field out of range, as the search would fail),
 *         _EMPTY (params->recall names no usable profile; message in err), _CORRUPT
 *         (that profile holds a bad value, named). */
CHIMERA_API chimera_status chimera_index_params_resolve(const chimera_index *index, uint32_t k,
                                                        const chimera_search_params *params,
                                                        int filtered, chimera_search_params *out,
                                                        chimera_error *err);

/* Searches every query: ids[i*k + r], scores[i*k + r] = query i's r-th result (user id,
 * full-bit estimated Chamfer score; the exact score with params->rerank_depth), best
 * first, padded with -1 / -INFINITY. Since 0.12.0 an estimate's centroid term <q, c>
 * comes from the centroids held at 8 bits a coordinate on every backend and probe (it
 * moves by about a fifth of the 4-bit estimator's error), so a document's score is the
 * same on every backend; a brute probe still picks by float scores (among the best by
 * 8-bit ones, bench/RESULTS.md 5.28). params and opts
 * may be NULL (defaults:
 * chimera_index_params_default); profile may be NULL.
 * @return CHIMERA_OK, _INVALID_ARG (also: a query of more than 256 tokens; chunks
 *         above 64; rerank_depth on an index that stores no
 *         vectors, or whose vectors an older library left incomplete), _DIM (query dimension differs from the index's),
 *         _EMPTY (every document of the index is deleted; or params->recall names no
 *         usable profile), _CORRUPT (the profile params->recall names holds a bad
 *         value, named; or a score came out
 *         NaN or infinite, or a factor it needed is: the message names the section; no
 *         result is returned for a damaged index), _DEVICE, _UNSUPPORTED (backend),
 *         _NOMEM; err (optional) receives this call's message.
 *
 * Concurrency: any number of threads may call this on one index at once, each with
 * its own k, params, opts, outputs, profile and err; every call's results are the same
 * as if it ran alone. An opened index never changes; what a search needs to write (the
 * backend's scratch and upload, its worker threads: a "session") is pooled inside the
 * handle. A call takes an idle session that fits its backend, thread count and sizes,
 * or makes one, and returns it when done, so a single-threaded caller reuses one
 * session (its first call pays the set-up, a device upload included) and T concurrent
 * callers end up with T sessions, kept until close. Pooled rather than a searcher
 * object the caller creates and passes: the call stays one handle and one function,
 * with no per-thread bookkeeping for the caller, and the cost of concurrency falls only
 * on programs that use it. Each session runs its own threads (opts->n_threads), so T
 * callers with n_threads = 0 start T x CPUs threads: give concurrent callers a share
 * each (n_threads = 1 for a server thread per request). On CUDA every session holds its
 * own copy of the index's device sections. */
CHIMERA_API chimera_status chimera_index_search(const chimera_index *index, const chimera_queries *queries,
                                    uint32_t k, const chimera_search_params *params,
                                    const chimera_search_opts *opts, int64_t *ids,
                                    float *scores, chimera_search_profile *profile,
                                    chimera_error *err);

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
    chimera_tune_point points[96]; /* the settings measured, in order, each once (the
                                      first 96; on a device, the last walk's) */
    uint64_t index_generation;  /* the generation of the index tuned (its manifest's) */
    uint64_t index_data_id;     /* the identity of its data (section checksums); profile
                                   save refuses an index whose data differs. 0: unknown,
                                   not checked (a result not made by chimera_index_tune) */
    /* Since 0.4.0: the held-out check of chimera_index_tune_heldout (zero otherwise) */
    int64_t n_tune, n_heldout;  /* queries tuned on, queries held out */
    double heldout_recall;      /* mean Recall@k of best on the held-out queries */
    double heldout_low, heldout_high; /* its 95% confidence interval */
    int64_t heldout_need;       /* held-out queries for an interval of half-width
                                   (1 - target) / 2 at the observed spread: more than
                                   n_heldout means the set is too small for the target */
    double tune_target;         /* the target the tuning queries were held to (raised
                                   above target_recall until the held-out bound met it) */
} chimera_tune_result;

/* The fastest setting whose Recall@k on these queries (a point estimate, no margin:
 * chimera_index_tune_heldout gives one) meets target_recall. On the CPU (since 0.11.1) by
 * chimera_index_tune_heldout's frontier walk, with these queries in place of held-out
 * ones (the held-out fields of res stay zero). On a CUDA device by
 * the paper's backward procedure: generous n_probe and k_refine, raise k_fullbit until
 * Recall@k >= target against `truth_ids` [n_queries x truth_k] (exact results, e.g.
 * from chimera_corpus_search), then shrink k_refine, then n_probe, keeping the target
 * (since 0.10.0 n_probe only while the search does not get clearly slower: fewer probes
 * can cost more where a search widens them again);
 * since 0.8.1 it then tries k_fullbit = k_refine (no 1-bit pass), shrinking n_probe
 * (since 0.10.0, before the depths) and then both depths, and keeps that when
 * measurably faster. Since 0.4.0, a target of 0.99 or more on an index that stores its vectors
 * (chimera_build_opts.rerank) is tuned with the exact re-rank on, every full-bit scored
 * document re-scored (rerank_depth = k_fullbit, in res->best and every point); since
 * 0.11.1 the CPU's frontier walk re-ranks the top 4k by full-bit score instead (at most
 * k_fullbit), and the top 2k where that keeps the target.
 * Thread-safe, as chimera_index_search (it is a series of searches).
 * @return CHIMERA_OK (see res->reached), _INVALID_ARG, or a search error (in err). */
CHIMERA_API chimera_status chimera_index_tune(const chimera_index *index, const chimera_queries *queries,
                                  const int64_t *truth_ids, uint32_t truth_k, uint32_t k,
                                  double target_recall, const chimera_search_opts *opts,
                                  chimera_tune_result *res, chimera_error *err);

/* Tuning that can be trusted on new queries: the queries are split at random (seeded)
 * into a tuning part and a held-out part (heldout_fraction of them; 0: one half); a walk
 * runs on the tuning part, and its choice is measured
 * on the held-out part with a 95% confidence interval over the per-query recalls (normal
 * approximation; the spread is at least that of k independent hits per query). While
 * the interval's lower bound misses the target, the tuning target is raised by the
 * shortfall and the tuning repeated; once one meets it, two walks at targets halfway
 * between the first target and the met one look for a faster setting that meets it
 * too (a raise by one pick's whole shortfall can overshoot). res->best is the fastest setting found whose
 * held-out lower bound meets the target (res->reached = 1), else the one with the
 * highest lower bound (reached = 0); res->recall is its held-out recall and the
 * held-out fields describe the interval (res->heldout_need > res->n_heldout: the query
 * set is too small to certify the target at this spread). As chimera_index_tune, a
 * target of 0.99 or more on an index that stores its vectors is tuned (and checked)
 * with the exact re-rank on.
 * The walk: on a CUDA device, chimera_index_tune's procedure. On the CPU (since 0.11.1)
 * a walk of the form without a 1-bit pass (k_refine = k_fullbit, the faster form there)
 * along the frontier of the fewest documents that meet the tuning target at each
 * n_probe, from 64 probes (up to 128 where fewer documents then suffice, and down),
 * choosing the cheapest setting by a model of the search's
 * cost from the counts it reports (not by its measured time, which a shared machine
 * moves by 2x); res->points then carry each setting's measured queries/s.
 * @return CHIMERA_OK; _INVALID_ARG (fewer than 20 queries or fewer than 10 on a side of
 *         the split, a fraction outside (0, 1), the arguments of chimera_index_tune); a
 *         search error. */
CHIMERA_API chimera_status chimera_index_tune_heldout(const chimera_index *index,
                                                      const chimera_queries *queries,
                                                      const int64_t *truth_ids, uint32_t truth_k,
                                                      uint32_t k, double target_recall,
                                                      double heldout_fraction, uint64_t seed,
                                                      const chimera_search_opts *opts,
                                                      chimera_tune_result *res,
                                                      chimera_error *err);

/* Opens the corpus the index was built from, as the build recorded it (the files of
 * chimera_corpus_open: tokens, doclens, ids), for exact truth (chimera_corpus_search).
 * Refuses what would give a wrong truth: the files changed since the build (size or
 * modification time) or documents were added, deleted or updated since.
 * @return CHIMERA_OK; _EMPTY (no source recorded: built from memory, or by an older
 *         version); _CONFLICT (a file changed, or the index did: the message says which
 *         and what to pass instead); the statuses of chimera_corpus_open. */
CHIMERA_API chimera_status chimera_index_source_open(const chimera_index *index,
                                                     chimera_corpus **out, chimera_error *err);

/* Stores `res` in the index at `dir` as the profile for (k, target_recall), replacing one
 * with the same key; the manifest is rewritten atomically (sections untouched). It is a
 * read-modify-write under the index's writer lock, so it merges with what other writers
 * committed meanwhile (two tunes saving at once keep both profiles), and it waits for a
 * writer that holds the lock (a build's commit) up to 30 s.
 * @return CHIMERA_OK, _INVALID_ARG, the statuses of opening the index, _CONFLICT (the
 *         index's data is not the one res was measured on: it was rebuilt since; tune
 *         again), _BUSY (another process kept the index locked), _IO, _NOMEM. */
CHIMERA_API chimera_status chimera_index_profile_save(const char *dir, uint32_t k,
                                                      double target_recall,
                                                      const chimera_tune_result *res,
                                                      chimera_error *err);

/* The stored profile for top-k whose target is the smallest >= target_recall (any k'
 * >= k qualifies when no profile has this k). A profile is stale once the documents
 * added, deleted or updated since it was tuned exceed a fifth of the index: its recall
 * was measured on other documents, so it is not used; nor is one whose tune did not
 * reach its target (res->reached = 0: chimera_index_profile_save stores it, but a
 * search by recall never picks it). Thread-safe. @return CHIMERA_OK,
 * _EMPTY (none; no message, or a message saying the one that qualified is stale), or
 * _CORRUPT (that profile holds a missing or out-of-range value; message in err,
 * optional). */
CHIMERA_API chimera_status chimera_index_profile_get(const chimera_index *index, uint32_t k,
                                         double target_recall, chimera_search_params *p,
                                         chimera_error *err);

/* One tuned profile as the index stores it (chimera_index_profile_list; since 0.13.0). */
typedef struct chimera_profile_entry {
    uint32_t k;
    double target_recall;   /* the target it was tuned for */
    double measured_recall; /* its held-out recall at tuning time */
    double qps;             /* its queries per second at tuning time */
    int reached;            /* 0: the target was out of reach; a search never picks it */
    int stale;              /* 1: more than a fifth of the documents changed since it was
                               tuned; a search never picks it */
    chimera_search_params params;
} chimera_profile_entry;

/* The tuned profiles the index stores, in stored order: up to max into out (out may be
 * NULL when max is 0). Entries that do not read as a profile (damaged values) are left
 * out; a search by recall that would pick one fails with CHIMERA_ERR_CORRUPT. Returns how
 * many there are (possibly more than max); 0 for a NULL index. Thread-safe. */
CHIMERA_API int chimera_index_profile_list(const chimera_index *index, chimera_profile_entry *out,
                                           int max);

/* Which of chimera_index_profile_list's entries chimera_index_profile_get(index, k,
 * target_recall) takes: its position in that list, or -1 when it takes none. Since
 * 0.13.0. Thread-safe. */
CHIMERA_API int chimera_index_profile_pick(const chimera_index *index, uint32_t k,
                                           double target_recall);

/* Recall@k of result ids [n x run_k] against exact ids [n x truth_k] (as the paper:
 * |R ∩ R'| / k per query, averaged; -1 entries are padding). 0 for NULL arrays, n <= 0
 * or k == 0. */
CHIMERA_API double chimera_results_eval_recall(const int64_t *run, uint32_t run_k,
                                               const int64_t *truth, uint32_t truth_k,
                                               int64_t n_queries, uint32_t k);

/* Pseudo-queries for tuning without a query log, made to resemble real queries rather
 * than copies of a document: each has a random target document; its length is m, or
 * with m = 0 log-uniform in 4..32 (since 0.14.0, before uniform: real query sets are
 * mostly short; 38% of 4-8 tokens, 30% of 9-16, 31% of 17-32, mean 13.25); each token is,
 * with probability 0.95, a token of the target and otherwise one of another random
 * document (real queries bring words their document lacks), perturbed by random noise
 * of relative norm 0.4..0.8 (per query) and rescaled to the source token's norm, so that
 * no query token equals a document token. Deterministic for a seed.
 * @return CHIMERA_OK, _INVALID_ARG (n <= 0, m > 4096), _EMPTY, _NOMEM. */
CHIMERA_API chimera_status chimera_corpus_sample_queries(const chimera_corpus *corpus, int64_t n,
                                                         uint32_t m, uint64_t seed,
                                                         chimera_queries **out, chimera_error *err);

/* ---------------------------------------------------------------------------------- */
/* Result files and evaluation                                                        */
/* ---------------------------------------------------------------------------------- */

/* Writes search results (ids and scores [n_queries x k], as a search fills them) as a
 * TREC run, one line per hit: `qid Q0 docid rank score tag`, with qid the query's index,
 * rank from 1; padding (-1) entries are skipped. The file is written to a temporary name
 * and renamed into place, so a failure leaves no partial file and an existing one
 * untouched. */
CHIMERA_API chimera_status chimera_results_write(const char *path, int64_t n_queries, uint32_t k,
                                                 const int64_t *ids, const float *scores,
                                                 const char *tag, chimera_error *err);

/* A TREC run (`qid Q0 docid rank score tag`) or qrels (`qid 0 docid relevance`) file
 * in memory. Ids are strings, so runs of other systems can be compared too. */
typedef struct chimera_run chimera_run;

CHIMERA_API chimera_status chimera_run_read(const char *path, chimera_run **out,
                                            chimera_error *err);
CHIMERA_API chimera_status chimera_run_read_qrels(const char *path, chimera_run **out,
                                                  chimera_error *err);
CHIMERA_API int64_t chimera_run_n_queries(const chimera_run *run);
/* The most hits any one query of the run has (0 for an empty run or NULL): a run cut
 * at depth 10 cannot show Recall@100, nor a truth of depth 100 measure Recall@1000.
 * Since 0.13.0. */
CHIMERA_API int64_t chimera_run_depth(const chimera_run *run);

/* Top-k document ids of queries "0" .. "n_queries-1" of a run whose ids are integers
 * (runs written by chimera): ids[i*k + r], -1 where the run has fewer.
 * @return CHIMERA_OK or _FORMAT (a non-integer document id). */
CHIMERA_API chimera_status chimera_run_topk_ids(const chimera_run *run, int64_t n_queries,
                                                uint32_t k, int64_t *ids, chimera_error *err);
CHIMERA_API void chimera_run_free(chimera_run *run);

/* Recall@k as in the paper: for each query of `truth`, |top-k(run) ∩ top-k(truth)| / k'
 * with k' = min(k, hits of truth for that query), averaged over the queries of truth (a
 * query missing from the run counts 0). Hits are ordered by rank (then score).
 * *n_queries (may be NULL) receives the number of queries averaged. */
CHIMERA_API chimera_status chimera_run_eval_recall(const chimera_run *run, const chimera_run *truth,
                                                   uint32_t k, double *recall, int64_t *n_queries,
                                                   chimera_error *err);

/* MRR@10 and NDCG@10 of `run` against graded `qrels` (relevance > 0 is relevant; NDCG
 * uses the grades as gains), averaged over the queries that have a relevant document. */
CHIMERA_API chimera_status chimera_run_eval_qrels(const chimera_run *run, const chimera_run *qrels,
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
    /* Since 0.4.0: the corpus's structure, for corpora unlike the default one */
    double topic_weight;  /* how far tokens lean towards their document's topic (0: 0.35;
                             < 0: not at all, a flat corpus; 1-2: strongly clustered
                             around the topics) */
    double query_noise;   /* context noise of query tokens (0: 0.35; larger: queries
                             further from their documents' tokens) */
} chimera_synth_opts;

/* Sets *opts to the defaults (every field 0). */
CHIMERA_API void chimera_synth_opts_default(chimera_synth_opts *opts);

/* Writes a corpus that behaves like contextual token embeddings into `out_dir` (created
 * if missing): tokens.npy [n_tokens, dim] f32 (L2-normalised), doclens.npy [n_docs] i64,
 * queries.npy [n_queries, query_len, dim] f32 and qrels.tsv (each query's target
 * document). Words follow a Zipf law over a vocabulary and recur across documents,
 * documents have topics and lengths vary; each query is made from its target
 * document's words and topic plus noise. Deterministic for a seed. Each file is written
 * to a temporary name and renamed, so a failure leaves none half-written. */
CHIMERA_API chimera_status chimera_synth_write(const char *out_dir, const chimera_synth_opts *opts,
                                               chimera_error *err);

#ifdef __cplusplus
}
#endif

#endif
