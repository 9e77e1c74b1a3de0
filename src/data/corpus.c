/* Corpus and query loading with validation (see corpus.h).
 *
 * All checks happen here, once, with messages that name the file and the offending row
 * or document: shapes and dtypes, lengths that do not sum to the token count, empty
 * documents or queries, duplicate or negative ids, and non-finite values. The value
 * scan reads the whole token matrix once (memory bandwidth bound, ~0.1 s per GB); it
 * can be skipped for trusted data. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/f16.h"
#include "core/rng.h"
#include "data/corpus.h"
#include "core/alloc.h"

/* ---- helpers ----------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Reads ids from an int .npy or a text file with one integer per line. */
chimera_status data_ids_read(const char *path, int64_t **ids, int64_t *n, chimera_error *err);
chimera_status data_ids_read(const char *path, int64_t **ids, int64_t *n, chimera_error *err)
{
    size_t len = strlen(path);
    if (len >= 4 && strcmp(path + len - 4, ".npy") == 0) return cm_npy_read_i64(path, ids, n, err);
    FILE *f = fopen(path, "r");
    if (!f) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    int64_t cap = 1024, cnt = 0;
    int64_t *v = cm_malloc((size_t)cap * sizeof *v);
    char line[128];
    chimera_status s = v ? CHIMERA_OK : cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    int64_t lineno = 0;
    while (s == CHIMERA_OK && fgets(line, sizeof line, f)) {
        lineno++;
        /* A line that does not fit would come back in pieces, and "5 <spaces> 7" would
         * then read as two ids: refuse it. An int64 id takes at most 20 characters. */
        if (!strchr(line, '\n')) {
            int ch = fgetc(f);
            if (ch != EOF) {
                s = cm_fail(err, CHIMERA_ERR_FORMAT, "%s:%lld: line longer than %d characters",
                            path, (long long)lineno, (int)sizeof line - 2);
                break;
            }
        }
        char *p = line, *end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '\0') continue;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (errno || end == p || *end != '\0') {
            s = cm_fail(err, CHIMERA_ERR_FORMAT, "%s:%lld: not an integer id", path,
                        (long long)lineno);
            break;
        }
        if (cnt == cap) {
            int64_t *nv = cm_realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            v = nv;
        }
        v[cnt++] = x;
    }
    fclose(f);
    if (s != CHIMERA_OK) {
        cm_free(v);
        return s;
    }
    *ids = v;
    *n = cnt;
    return CHIMERA_OK;
}

static chimera_status check_ids(const int64_t *ids, int64_t n, const char *name,
                                chimera_error *err)
{
    int64_t *sorted = cm_malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", name);
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0) {
            cm_free(sorted);
            return cm_fail(err, CHIMERA_ERR_VALUE, "%s: id of document %lld is negative (%lld)",
                           name, (long long)i, (long long)ids[i]);
        }
        sorted[i] = ids[i];
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_i64);
    for (int64_t i = 1; i < n; i++) {
        if (sorted[i] == sorted[i - 1]) {
            int64_t dup = sorted[i];
            cm_free(sorted);
            return cm_fail(err, CHIMERA_ERR_VALUE, "%s: id %lld appears more than once", name,
                           (long long)dup);
        }
    }
    cm_free(sorted);
    return CHIMERA_OK;
}

/* Finds the first non-finite value in rows [0, n_rows); returns its flat index or -1. */
static int64_t find_nonfinite(const void *data, cm_dtype t, int64_t count)
{
    if (t == CM_F32) {
        const uint32_t *u = data;
        for (int64_t i = 0; i < count; i++)
            if ((u[i] & 0x7f800000u) == 0x7f800000u) return i;
    } else {
        const uint16_t *u = data;
        for (int64_t i = 0; i < count; i++)
            if ((u[i] & 0x7c00u) == 0x7c00u) return i;
    }
    return -1;
}

static int64_t doc_of_row(const int64_t *off, int64_t n_docs, int64_t row)
{
    int64_t lo = 0, hi = n_docs; /* off[lo] <= row < off[hi] */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (off[mid] <= row) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Builds doc_off from lengths and checks them against n_tokens. */
static chimera_status build_offsets(data_corpus *c, const int64_t *lens, const char *name,
                                    const chimera_corpus_opts *opts, chimera_error *err)
{
    c->doc_off = cm_malloc((size_t)(c->n_docs + 1) * sizeof *c->doc_off);
    if (!c->doc_off) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", name);
    int64_t sum = 0;
    c->doc_off[0] = 0;
    for (int64_t i = 0; i < c->n_docs; i++) {
        if (lens[i] < 0)
            return cm_fail(err, CHIMERA_ERR_VALUE, "%s: document %lld has negative length %lld",
                           name, (long long)i, (long long)lens[i]);
        if (lens[i] == 0 && !(opts && opts->allow_empty))
            return cm_fail(err, CHIMERA_ERR_EMPTY,
                           "%s: document %lld is empty (zero tokens); remove it or allow empty "
                           "documents",
                           name, (long long)i);
        if (lens[i] > c->n_tokens - sum)
            return cm_fail(err, CHIMERA_ERR_DIM,
                           "%s: document lengths exceed the %lld token rows (at document %lld)",
                           name, (long long)c->n_tokens, (long long)i);
        sum += lens[i];
        c->doc_off[i + 1] = sum;
    }
    if (sum != c->n_tokens)
        return cm_fail(err, CHIMERA_ERR_DIM,
                       "%s: document lengths sum to %lld but the token matrix has %lld rows", name,
                       (long long)sum, (long long)c->n_tokens);
    return CHIMERA_OK;
}

static chimera_status finish_open(data_corpus *c, const char *tokens_name, const int64_t *lens,
                                  const char *lens_name, const char *ids_name,
                                  const chimera_corpus_opts *opts, chimera_error *err)
{
    if (c->n_docs <= 0)
        return cm_fail(err, CHIMERA_ERR_EMPTY, "%s: no documents", lens_name);
    CM_TRY(build_offsets(c, lens, lens_name, opts, err));
    if (c->ids) CM_TRY(check_ids(c->ids, c->n_docs, ids_name, err));
    c->unchecked = opts && opts->skip_value_check;
    if (!c->unchecked) {
        int64_t bad = find_nonfinite(c->tokens, c->dtype, c->n_tokens * (int64_t)c->dim);
        if (bad >= 0) {
            int64_t row = bad / c->dim;
            return cm_fail(err, CHIMERA_ERR_VALUE,
                           "%s: row %lld (document %lld), column %lld is NaN or infinite",
                           tokens_name, (long long)row,
                           (long long)doc_of_row(c->doc_off, c->n_docs, row),
                           (long long)(bad % c->dim));
        }
    }
    return CHIMERA_OK;
}

/* ---- corpus ------------------------------------------------------------------------ */

chimera_status data_corpus_open(data_corpus *c, const char *tokens_npy, const char *doclens_npy,
                                const char *ids_path, const chimera_corpus_opts *opts,
                                chimera_error *err)
{
    memset(c, 0, sizeof *c);
    int64_t *lens = NULL, n_lens = 0;
    chimera_status s = cm_npy_open(tokens_npy, &c->file, err);
    if (s != CHIMERA_OK) goto done;
    if (c->file.ndim != 2) {
        s = cm_fail(err, CHIMERA_ERR_DIM, "%s: token matrix must be 2-D [n_tokens, dim], got %d-D",
                    tokens_npy, c->file.ndim);
        goto done;
    }
    if (c->file.dtype != CM_F32 && c->file.dtype != CM_F16) {
        s = cm_fail(err, CHIMERA_ERR_UNSUPPORTED, "%s: tokens must be float32 or float16, got %s",
                    tokens_npy, cm_dtype_name(c->file.dtype));
        goto done;
    }
    if (c->file.shape[1] <= 0 || c->file.shape[1] > 4096) {
        s = cm_fail(err, CHIMERA_ERR_DIM, "%s: dimension %lld is outside 1..4096", tokens_npy,
                    (long long)c->file.shape[1]);
        goto done;
    }
    c->tokens = c->file.data;
    c->dtype = c->file.dtype;
    c->n_tokens = c->file.shape[0];
    c->dim = (uint32_t)c->file.shape[1];
    s = cm_npy_read_i64(doclens_npy, &lens, &n_lens, err);
    if (s != CHIMERA_OK) goto done;
    c->n_docs = n_lens;
    if (ids_path) {
        int64_t n_ids;
        s = data_ids_read(ids_path, &c->ids, &n_ids, err);
        if (s != CHIMERA_OK) goto done;
        if (n_ids != n_lens) {
            s = cm_fail(err, CHIMERA_ERR_DIM, "%s: %lld ids for %lld documents", ids_path,
                        (long long)n_ids, (long long)n_lens);
            goto done;
        }
    }
    s = finish_open(c, tokens_npy, lens, doclens_npy, ids_path, opts, err);
done:
    cm_free(lens);
    if (s != CHIMERA_OK) data_corpus_free(c);
    return s;
}

chimera_status data_corpus_wrap(data_corpus *c, const float *tokens, int64_t n_tokens,
                                uint32_t dim, const int64_t *doclens, int64_t n_docs,
                                const int64_t *ids, const chimera_corpus_opts *opts,
                                chimera_error *err)
{
    memset(c, 0, sizeof *c);
    if (!tokens || !doclens || dim == 0 || dim > 4096 || n_tokens < 0 || n_docs < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "corpus: tokens and doclens must be given, 1 <= dim <= 4096");
    c->tokens = tokens;
    c->dtype = CM_F32;
    c->n_tokens = n_tokens;
    c->dim = dim;
    c->n_docs = n_docs;
    chimera_status s = CHIMERA_OK;
    if (ids) {
        c->ids = cm_malloc((size_t)(n_docs ? n_docs : 1) * sizeof *c->ids);
        if (!c->ids) s = cm_fail(err, CHIMERA_ERR_NOMEM, "corpus: out of memory");
        else memcpy(c->ids, ids, (size_t)n_docs * sizeof *ids);
    }
    if (s == CHIMERA_OK) s = finish_open(c, "tokens", doclens, "doclens", "ids", opts, err);
    if (s != CHIMERA_OK) data_corpus_free(c);
    return s;
}

chimera_status data_corpus_slice(data_corpus *out, const data_corpus *c, int64_t doc_start,
                                 int64_t n_docs, int check_values, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    if (doc_start < 0 || n_docs < 1 || doc_start > c->n_docs - n_docs)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "corpus slice: documents [%lld, %lld) are not within the corpus's %lld",
                       (long long)doc_start, (long long)(doc_start + n_docs),
                       (long long)c->n_docs);
    const int64_t r0 = c->doc_off[doc_start], r1 = c->doc_off[doc_start + n_docs];
    const size_t esz = c->dtype == CM_F32 ? 4 : 2;
    out->tokens = (const char *)c->tokens + (size_t)r0 * c->dim * esz;
    out->dtype = c->dtype;
    out->n_tokens = r1 - r0;
    out->dim = c->dim;
    out->n_docs = n_docs;
    out->unchecked = c->unchecked;
    out->doc_off = cm_malloc((size_t)(n_docs + 1) * sizeof *out->doc_off);
    out->ids = cm_malloc((size_t)n_docs * sizeof *out->ids);
    if (!out->doc_off || !out->ids) {
        data_corpus_free(out);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "corpus slice: out of memory");
    }
    for (int64_t i = 0; i <= n_docs; i++) out->doc_off[i] = c->doc_off[doc_start + i] - r0;
    /* the documents keep the ids they have in the whole corpus (rows, without ids) */
    for (int64_t i = 0; i < n_docs; i++) out->ids[i] = data_corpus_id(c, doc_start + i);
    if (check_values) {
        int64_t bad = find_nonfinite(out->tokens, out->dtype, out->n_tokens * (int64_t)out->dim);
        if (bad >= 0) {
            int64_t row = bad / out->dim, doc = doc_start + doc_of_row(out->doc_off, n_docs, row);
            data_corpus_free(out);
            return cm_fail(err, CHIMERA_ERR_VALUE,
                           "tokens: row %lld (document %lld), column %lld is NaN or infinite",
                           (long long)(r0 + row), (long long)doc, (long long)(bad % c->dim));
        }
    }
    return CHIMERA_OK;
}

void data_corpus_free(data_corpus *c)
{
    cm_npy_close(&c->file);
    cm_free(c->doc_off);
    cm_free(c->ids);
    memset(c, 0, sizeof *c);
}

const float *data_corpus_rows(const data_corpus *c, int64_t row, int64_t n, float *scratch)
{
    if (c->dtype == CM_F32) return (const float *)c->tokens + row * (int64_t)c->dim;
    const uint16_t *h = (const uint16_t *)c->tokens + row * (int64_t)c->dim;
    for (int64_t i = 0; i < n * (int64_t)c->dim; i++) scratch[i] = cm_f16_to_f32(h[i]);
    return scratch;
}

/* ---- queries ----------------------------------------------------------------------- */

static chimera_status check_queries(const data_queries *q, const char *name, chimera_error *err)
{
    for (int64_t i = 0; i < q->n; i++) {
        if (q->off[i + 1] == q->off[i])
            return cm_fail(err, CHIMERA_ERR_EMPTY, "%s: query %lld is empty (zero tokens)", name,
                           (long long)i);
        int64_t bad = find_nonfinite(q->tokens + q->off[i] * q->dim, CM_F32,
                                     (q->off[i + 1] - q->off[i]) * q->dim);
        if (bad >= 0)
            return cm_fail(err, CHIMERA_ERR_VALUE,
                           "%s: query %lld, token %lld, column %lld is NaN or infinite", name,
                           (long long)i, (long long)(bad / q->dim), (long long)(bad % q->dim));
    }
    return CHIMERA_OK;
}

chimera_status data_queries_new(data_queries *q, const float *tokens, int64_t n, uint32_t dim,
                                const int64_t *qlens, uint32_t m, chimera_error *err)
{
    memset(q, 0, sizeof *q);
    if (!tokens || n <= 0 || dim == 0 || dim > 4096 || (!qlens && m == 0))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "queries: need tokens, n > 0, 1 <= dim <= 4096 and qlens or m > 0");
    q->n = n;
    q->dim = dim;
    q->off = cm_malloc((size_t)(n + 1) * sizeof *q->off);
    if (!q->off) return cm_fail(err, CHIMERA_ERR_NOMEM, "queries: out of memory");
    q->off[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = qlens ? qlens[i] : m;
        if (len < 0 || len > 65536) {
            data_queries_free(q);
            return cm_fail(err, CHIMERA_ERR_VALUE, "queries: query %lld has length %lld",
                           (long long)i, (long long)len);
        }
        q->off[i + 1] = q->off[i] + len;
    }
    size_t bytes = (size_t)q->off[n] * dim * sizeof(float);
    q->tokens = cm_aligned_alloc(64, bytes);
    if (!q->tokens) {
        data_queries_free(q);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "queries: out of memory");
    }
    memcpy(q->tokens, tokens, bytes);
    chimera_status s = check_queries(q, "queries", err);
    if (s != CHIMERA_OK) data_queries_free(q);
    return s;
}

chimera_status data_queries_open(data_queries *q, const char *queries_npy, const char *qlens_npy,
                                 chimera_error *err)
{
    memset(q, 0, sizeof *q);
    cm_npy a;
    int64_t *lens = NULL, n_lens = 0;
    CM_TRY(cm_npy_open(queries_npy, &a, err));
    chimera_status s = CHIMERA_OK;
    int64_t n, total;
    uint32_t dim;
    if (a.dtype != CM_F32 && a.dtype != CM_F16) {
        s = cm_fail(err, CHIMERA_ERR_UNSUPPORTED, "%s: queries must be float32 or float16, got %s",
                    queries_npy, cm_dtype_name(a.dtype));
        goto done;
    }
    if (a.ndim == 3 && !qlens_npy) {
        n = a.shape[0];
        total = a.shape[0] * a.shape[1];
        dim = (uint32_t)a.shape[2];
        if (a.shape[1] == 0) {
            s = cm_fail(err, CHIMERA_ERR_EMPTY, "%s: queries have zero tokens", queries_npy);
            goto done;
        }
    } else if (a.ndim == 2 && qlens_npy) {
        s = cm_npy_read_i64(qlens_npy, &lens, &n_lens, err);
        if (s != CHIMERA_OK) goto done;
        n = n_lens;
        total = a.shape[0];
        dim = (uint32_t)a.shape[1];
        int64_t sum = 0;
        for (int64_t i = 0; i < n_lens; i++) {
            if (lens[i] < 0) {
                s = cm_fail(err, CHIMERA_ERR_DIM, "%s: query %lld has negative length %lld",
                            qlens_npy, (long long)i, (long long)lens[i]);
                goto done;
            }
            if (lens[i] > total - sum) {
                s = cm_fail(err, CHIMERA_ERR_DIM,
                            "%s: query lengths exceed the %lld token rows (at query %lld)",
                            qlens_npy, (long long)total, (long long)i);
                goto done;
            }
            sum += lens[i];
        }
        if (sum != total) {
            s = cm_fail(err, CHIMERA_ERR_DIM,
                        "%s: query lengths sum to %lld but %s has %lld rows", qlens_npy,
                        (long long)sum, queries_npy, (long long)total);
            goto done;
        }
    } else if (a.ndim == 3) {
        s = cm_fail(err, CHIMERA_ERR_DIM, "%s: 3-D queries [n, m, dim] take no query lengths",
                    queries_npy);
        goto done;
    } else if (a.ndim == 2) {
        s = cm_fail(err, CHIMERA_ERR_DIM,
                    "%s: 2-D queries [total, dim] need a query-lengths file (--qlens)",
                    queries_npy);
        goto done;
    } else {
        s = cm_fail(err, CHIMERA_ERR_DIM,
                    "%s: queries must be [n, m, dim] or [total, dim], got %d-D", queries_npy,
                    a.ndim);
        goto done;
    }
    if (n <= 0) {
        s = cm_fail(err, CHIMERA_ERR_EMPTY, "%s: no queries", queries_npy);
        goto done;
    }
    if (dim == 0 || dim > 4096) {
        s = cm_fail(err, CHIMERA_ERR_DIM, "%s: dimension %u is outside 1..4096", queries_npy, dim);
        goto done;
    }
    {
        float *tmp = NULL;
        const float *src = a.data;
        if (a.dtype == CM_F16) {
            tmp = cm_malloc((size_t)(total ? total : 1) * dim * sizeof *tmp);
            if (!tmp) {
                s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", queries_npy);
                goto done;
            }
            const uint16_t *h = a.data;
            for (int64_t i = 0; i < total * (int64_t)dim; i++) tmp[i] = cm_f16_to_f32(h[i]);
            src = tmp;
        }
        s = data_queries_new(q, src, n, dim, lens, lens ? 0 : (uint32_t)a.shape[1], err);
        cm_free(tmp);
        if (s != CHIMERA_OK) {
            cm_fail_prefix(err, "%s", queries_npy);
            goto done;
        }
    }
done:
    cm_free(lens);
    cm_npy_close(&a);
    return s;
}

void data_queries_free(data_queries *q)
{
    cm_free(q->tokens);
    cm_free(q->off);
    memset(q, 0, sizeof *q);
}

/* Pseudo-queries that resemble real ones (see chimera_corpus_sample_queries). A real
 * query is short or long, does not copy the document it was written for (its context
 * differs, so no query token equals a document token) and may bring a word the document
 * does not hold. Copies of one document's tokens are the easiest queries there are
 * (every token has an exact match in the target, so the target's clusters are hit
 * head-on), and tuning on them overestimates recall. So each query here has a target
 * document and:
 *   - a length drawn log-uniformly from 4..32 (m == 0), or m tokens;
 *   - each token, with probability 0.95, a token of the target, else a token of another
 *     random document;
 *   - a perturbation of relative norm drawn uniformly from 0.4..0.8 per query (some
 *     queries paraphrase more than others), then rescaled to the source token's norm
 *     (corpora whose tokens are not unit vectors keep their scale).
 * Measured against real queries at the same settings (bench/RESULTS.md section 5.6):
 * strangers are what makes a pseudo-query hard, far more than the perturbation. With
 * 30% of them (this generator's first version) a top-100 on a strongly clustered corpus
 * mixed several topics, and pseudo Recall@100 stayed 0.09 below the real queries'
 * (0.88 against 0.978), so the calibration bought settings 3x dearer than needed; with
 * 5% the pseudo-queries are within +-0.01 of the generator's queries on two generated
 * corpora and 0.01-0.05 harder than real text queries on the real corpus: on the
 * safe side, and the held-out lower bound adds the margin.
 *
 * Why log-uniform lengths. Recall falls as queries shorten: fewer tokens carry the
 * target, so more documents come near it. Real query sets are mostly short (the real
 * corpus of bench/RESULTS.md section 7: 4-32 tokens, mean 12.1; users' logs often 4-16),
 * and with lengths uniform in 4..32 (mean 18) a calibration that met 0.95 on average met
 * it through the long queries: on 10^7 generated tokens its k = 10 and 100 defaults got
 * 0.9485 and 0.9465 on the generator's queries cut to 4-16 tokens, though at each length
 * those queries did as well as the pseudo-queries or better, within noise (section
 * 5.35). Log-uniform
 * lengths give each doubling of the length about the same share (38% of 4-8 tokens, 31%
 * of 17-32), as many short queries as a real set has, or more. */
#define SAMPLE_P_TARGET 0.95
#define SAMPLE_NOISE_MIN 0.4
#define SAMPLE_NOISE_MAX 0.8

/* floor(MIN ((MAX + 1) / MIN)^u) for u uniform in [0, 1): log-uniform over MIN..MAX */
static int64_t sample_len(cm_rng *r)
{
    double span = log((DATA_SAMPLE_MAX_LEN + 1.0) / DATA_SAMPLE_MIN_LEN);
    int64_t len = (int64_t)(DATA_SAMPLE_MIN_LEN * exp(span * cm_rng_uniform(r)));
    return len < DATA_SAMPLE_MIN_LEN ? DATA_SAMPLE_MIN_LEN
           : len > DATA_SAMPLE_MAX_LEN ? DATA_SAMPLE_MAX_LEN : len;
}

double data_sample_mean_len(void)
{
    double span = log((DATA_SAMPLE_MAX_LEN + 1.0) / DATA_SAMPLE_MIN_LEN), mean = 0;
    for (int len = DATA_SAMPLE_MIN_LEN; len <= DATA_SAMPLE_MAX_LEN; len++)
        mean += len * log((len + 1.0) / len) / span;
    return mean;
}

static int64_t random_nonempty_doc(const data_corpus *c, cm_rng *r)
{
    int64_t doc;
    do doc = (int64_t)cm_rng_below(r, (uint64_t)c->n_docs);
    while (c->doc_off[doc + 1] == c->doc_off[doc]);
    return doc;
}

chimera_status data_queries_sample(data_queries *q, const data_corpus *c, int64_t n, uint32_t m,
                                   uint64_t seed, chimera_error *err)
{
    memset(q, 0, sizeof *q);
    if (n <= 0 || m > 4096)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "sample queries: need n > 0 and m <= 4096 (0: lengths 4..32)");
    if (c->n_tokens == 0)
        return cm_fail(err, CHIMERA_ERR_EMPTY, "sample queries: the corpus has no tokens");
    uint32_t d = c->dim, max_m = m ? m : DATA_SAMPLE_MAX_LEN;
    float *buf = cm_malloc((size_t)n * max_m * d * sizeof(float));
    float *row = cm_malloc((size_t)d * sizeof(float));
    int64_t *lens = cm_malloc((size_t)n * sizeof *lens);
    if (!buf || !row || !lens) {
        cm_free(buf);
        cm_free(row);
        cm_free(lens);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "sample queries: out of memory");
    }
    cm_rng r;
    cm_rng_seed(&r, seed, 77);
    float *o = buf;
    for (int64_t i = 0; i < n; i++) {
        int64_t doc = random_nonempty_doc(c, &r);
        lens[i] = m ? m : sample_len(&r);
        double noise = SAMPLE_NOISE_MIN + (SAMPLE_NOISE_MAX - SAMPLE_NOISE_MIN) * cm_rng_uniform(&r);
        for (int64_t t = 0; t < lens[i]; t++, o += d) {
            int64_t src = cm_rng_uniform(&r) < SAMPLE_P_TARGET ? doc : random_nonempty_doc(c, &r);
            int64_t len = c->doc_off[src + 1] - c->doc_off[src];
            int64_t tok = c->doc_off[src] + (int64_t)cm_rng_below(&r, (uint64_t)len);
            const float *v = data_corpus_rows(c, tok, 1, row);
            double v2 = 0, n2 = 0;
            for (uint32_t x = 0; x < d; x++) v2 += (double)v[x] * v[x];
            /* per coordinate noise/sqrt(d) of the token's norm: a perturbation of relative
             * norm `noise` in a random direction */
            double sd = noise * sqrt(v2) / sqrt((double)d);
            for (uint32_t x = 0; x < d; x++) {
                o[x] = v[x] + (float)(sd * cm_rng_gauss(&r));
                n2 += (double)o[x] * o[x];
            }
            float scale = (float)(n2 > 0 && v2 > 0 ? sqrt(v2 / n2) : 1);
            for (uint32_t x = 0; x < d; x++) o[x] *= scale;
        }
    }
    chimera_status s = data_queries_new(q, buf, n, d, lens, 0, err);
    cm_free(buf);
    cm_free(row);
    cm_free(lens);
    return s;
}
