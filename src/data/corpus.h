/* Input views: the document token matrix with its document lengths and ids, and the
 * query token sets, validated once when opened so everything downstream can trust them.
 *
 * A corpus's token matrix stays memory-mapped (float32 or float16) and is read in row
 * blocks through data_corpus_rows(), which converts float16 blocks into a caller's
 * scratch buffer: nothing ever holds the whole matrix in float32. */
#ifndef CHIMERA_DATA_CORPUS_H
#define CHIMERA_DATA_CORPUS_H

#include <stdint.h>

#include "chimera.h"
#include "core/npy.h"

typedef struct data_corpus {
    cm_npy file;        /* the mapped tokens.npy (zeroed when wrapping memory) */
    const void *tokens; /* n_tokens x dim, dtype below */
    cm_dtype dtype;     /* CM_F32 or CM_F16 */
    int64_t n_tokens;
    uint32_t dim;
    int64_t n_docs;
    int64_t *doc_off; /* n_docs + 1 row offsets (owned) */
    int64_t *ids;     /* n_docs user ids (owned), or NULL: id = row */
    int unchecked;    /* opened with skip_value_check: may hold NaN or infinity */
} data_corpus;

chimera_status data_corpus_open(data_corpus *c, const char *tokens_npy, const char *doclens_npy,
                                const char *ids_path, const chimera_corpus_opts *opts,
                                chimera_error *err);
chimera_status data_corpus_wrap(data_corpus *c, const float *tokens, int64_t n_tokens,
                                uint32_t dim, const int64_t *doclens, int64_t n_docs,
                                const int64_t *ids, const chimera_corpus_opts *opts,
                                chimera_error *err);
void data_corpus_free(data_corpus *c);
/* A view of documents [doc_start, doc_start + n_docs) of c: its tokens point into c's
 * (c must outlive it; the view owns no mapping), its offsets start at 0, and every
 * document keeps its id in c (its row in c when c has no ids). check_values: scan the
 * view's tokens for NaN/Inf (a corpus opened with skip_value_check scans nothing). */
chimera_status data_corpus_slice(data_corpus *out, const data_corpus *c, int64_t doc_start,
                                 int64_t n_docs, int check_values, chimera_error *err);

/* Ids from an int .npy (int32/int64) or a text file of one integer per line: *ids
 * (cm_malloc'd, n entries; may be empty). Values are not checked. */
chimera_status data_ids_read(const char *path, int64_t **ids, int64_t *n, chimera_error *err);

static inline int64_t data_corpus_id(const data_corpus *c, int64_t doc)
{
    return c->ids ? c->ids[doc] : doc;
}

/* Rows [row, row + n) as float32: a pointer into the mapping for float32 data, or
 * `scratch` (n * dim floats) filled by conversion for float16. */
const float *data_corpus_rows(const data_corpus *c, int64_t row, int64_t n, float *scratch);

/* Query token sets, always float32 in memory. */
typedef struct data_queries {
    float *tokens;  /* off[n] x dim (owned) */
    int64_t n;
    uint32_t dim;
    int64_t *off;   /* n + 1 (owned) */
} data_queries;

chimera_status data_queries_open(data_queries *q, const char *queries_npy, const char *qlens_npy,
                                 chimera_error *err);
chimera_status data_queries_new(data_queries *q, const float *tokens, int64_t n, uint32_t dim,
                                const int64_t *qlens, uint32_t m, chimera_error *err);
void data_queries_free(data_queries *q);

/* The lengths data_queries_sample draws from when m == 0, both included, log-uniformly:
 * length L with probability ln((L + 1) / L) / ln((MAX + 1) / MIN), so that 38% of the
 * queries have 4-8 tokens, 30% 9-16 and 31% 17-32 (data_queries_sample says why). */
#define DATA_SAMPLE_MIN_LEN 4
#define DATA_SAMPLE_MAX_LEN 32
/* The expected length of such a query (13.25 tokens). */
double data_sample_mean_len(void);
/* n pseudo-queries of m tokens (0: 4..32, as above), each mixing one random non-empty
 * document's tokens with other documents' and perturbing them (see
 * chimera_corpus_sample_queries). */
chimera_status data_queries_sample(data_queries *q, const data_corpus *c, int64_t n, uint32_t m,
                                   uint64_t seed, chimera_error *err);

#endif
