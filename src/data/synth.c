/* Synthetic corpus generator (see synth.h).
 *
 * Real ColBERT token vectors are not uniform noise: a word's vectors recur across
 * documents and stay close (cosine ~0.7-0.9) while context shifts them; words form
 * semantic groups; a document's tokens lean towards its topic; word frequencies follow
 * Zipf's law; lengths vary widely. IVF clustering, RaBitQ error and pruning all behave
 * very differently on uniform noise, so the generator models exactly these effects:
 *
 *   word vector    w = normalise(group_centre(word) + 1.0 * u)          (u: random unit)
 *   token vector   t = normalise(w + 0.35 * topic(doc) + 0.30 * u')  (0.35: topic_weight)
 *   document       topic ~ uniform over n_topics; length ~ lognormal(log 70, 0.6),
 *                  clipped to [min_len, max_len]; each token's word drawn from the
 *                  topic's own Zipf list (p = 0.55) or the global Zipf law (exponent
 *                  1.07, as in English text)
 *   query          32 tokens: with p = 0.6 a word of the target document, else a word of
 *                  its topic; embedded with the target's topic and fresh context noise
 *
 * Everything derives from (seed, stream) pairs: document i uses stream 1 + i and query
 * j stream 2^40 + j, so a document can be regenerated alone (queries need their
 * target's words) and the output does not depend on how the work is split. */
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "core/npy.h"
#include "core/progress.h"
#include "core/rng.h"
#include "data/synth.h"
#include "core/alloc.h"

#define N_GROUPS 512
#define TOPIC_WORDS 400
#define ZIPF_S 1.07
#define P_TOPIC_WORD 0.55
#define P_QUERY_DOC_WORD 0.6
#define W_TOPIC 0.35f
#define W_CONTEXT 0.30f
#define W_QUERY_NOISE 0.35f

chimera_synth_opts data_synth_defaults(const chimera_synth_opts *opts)
{
    chimera_synth_opts o = {0};
    if (opts) o = *opts;
    if (!o.n_docs) o.n_docs = 10000;
    if (!o.dim) o.dim = 128;
    if (!o.n_queries) o.n_queries = 100;
    if (!o.query_len) o.query_len = 32;
    if (!o.vocab) o.vocab = 30000;
    if (!o.n_topics) o.n_topics = 200;
    if (!o.min_len) o.min_len = 16;
    if (!o.max_len) o.max_len = 300;
    if (o.topic_weight == 0) o.topic_weight = W_TOPIC;
    if (o.topic_weight < 0) o.topic_weight = 0;
    if (o.query_noise == 0) o.query_noise = W_QUERY_NOISE;
    return o;
}

typedef struct model {
    chimera_synth_opts o;
    float *words;      /* vocab x dim, unit */
    float *topics;     /* n_topics x dim, unit */
    double *zipf_cdf;  /* vocab */
    uint32_t *topic_words; /* n_topics x TOPIC_WORDS word ids */
    double *topic_cdf; /* TOPIC_WORDS */
} model;

static void random_unit(cm_rng *r, float *v, uint32_t d)
{
    double n2 = 0;
    for (uint32_t i = 0; i < d; i++) {
        v[i] = (float)cm_rng_gauss(r);
        n2 += (double)v[i] * v[i];
    }
    float inv = (float)(1.0 / sqrt(n2 > 0 ? n2 : 1));
    for (uint32_t i = 0; i < d; i++) v[i] *= inv;
}

static void normalise(float *v, uint32_t d)
{
    double n2 = 0;
    for (uint32_t i = 0; i < d; i++) n2 += (double)v[i] * v[i];
    float inv = (float)(1.0 / sqrt(n2 > 0 ? n2 : 1));
    for (uint32_t i = 0; i < d; i++) v[i] *= inv;
}

static uint32_t sample_cdf(const double *cdf, uint32_t n, double u)
{
    uint32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (cdf[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void zipf_cdf(double *cdf, uint32_t n)
{
    double s = 0;
    for (uint32_t i = 0; i < n; i++) cdf[i] = (s += 1.0 / pow(i + 1.0, ZIPF_S));
    for (uint32_t i = 0; i < n; i++) cdf[i] /= s;
}

static void model_free(model *m)
{
    cm_free(m->words);
    cm_free(m->topics);
    cm_free(m->zipf_cdf);
    cm_free(m->topic_words);
    cm_free(m->topic_cdf);
}

static chimera_status model_init(model *m, const chimera_synth_opts *opts, chimera_error *err)
{
    memset(m, 0, sizeof *m);
    m->o = data_synth_defaults(opts);
    const chimera_synth_opts *o = &m->o;
    /* each refusal names its field (and its value), not the whole list of rules */
    if (o->n_docs < 0 || o->n_queries < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "synth: %s %lld is negative",
                       o->n_docs < 0 ? "n_docs" : "n_queries",
                       (long long)(o->n_docs < 0 ? o->n_docs : o->n_queries));
    if (o->dim > 4096)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "synth: dim %u is over 4096", o->dim);
    if (o->min_len > o->max_len)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "synth: min_len %u is over max_len %u", o->min_len, o->max_len);
    if (o->vocab < 2)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "synth: vocab %u: need at least 2",
                       o->vocab);
    if (!(o->topic_weight <= 100))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "synth: topic_weight %g: at most 100",
                       (double)o->topic_weight);
    if (!(o->query_noise > 0 && o->query_noise <= 100))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "synth: query_noise %g: need (0, 100]",
                       (double)o->query_noise);
    uint32_t d = o->dim;
    m->words = cm_malloc((size_t)o->vocab * d * sizeof(float));
    m->topics = cm_malloc((size_t)o->n_topics * d * sizeof(float));
    m->zipf_cdf = cm_malloc((size_t)o->vocab * sizeof(double));
    m->topic_words = cm_malloc((size_t)o->n_topics * TOPIC_WORDS * sizeof(uint32_t));
    m->topic_cdf = cm_malloc(TOPIC_WORDS * sizeof(double));
    float *groups = cm_malloc((size_t)N_GROUPS * d * sizeof(float));
    float *u = cm_malloc(d * sizeof(float));
    if (!m->words || !m->topics || !m->zipf_cdf || !m->topic_words || !m->topic_cdf || !groups ||
        !u) {
        cm_free(groups);
        cm_free(u);
        model_free(m);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "synth: out of memory");
    }
    cm_rng r;
    cm_rng_seed(&r, o->seed, 0);
    for (uint32_t g = 0; g < N_GROUPS; g++) random_unit(&r, groups + (size_t)g * d, d);
    for (uint32_t w = 0; w < o->vocab; w++) {
        const float *gc = groups + (size_t)cm_rng_below(&r, N_GROUPS) * d;
        float *wv = m->words + (size_t)w * d;
        random_unit(&r, u, d);
        for (uint32_t i = 0; i < d; i++) wv[i] = gc[i] + u[i];
        normalise(wv, d);
    }
    for (uint32_t t = 0; t < o->n_topics; t++) {
        random_unit(&r, m->topics + (size_t)t * d, d);
        /* A topic's words: mostly from the whole vocabulary (so frequent words are
         * shared between topics), each topic ranked by its own Zipf law. */
        for (uint32_t j = 0; j < TOPIC_WORDS; j++)
            m->topic_words[(size_t)t * TOPIC_WORDS + j] = (uint32_t)cm_rng_below(&r, o->vocab);
    }
    zipf_cdf(m->zipf_cdf, o->vocab);
    zipf_cdf(m->topic_cdf, TOPIC_WORDS);
    cm_free(groups);
    cm_free(u);
    return CHIMERA_OK;
}

typedef struct doc_plan {
    uint32_t topic, len;
} doc_plan;

static doc_plan plan_doc(const model *m, int64_t doc, cm_rng *r)
{
    cm_rng_seed(r, m->o.seed, 1 + (uint64_t)doc);
    doc_plan p;
    p.topic = (uint32_t)cm_rng_below(r, m->o.n_topics);
    double len = exp(log(70.0) + 0.6 * cm_rng_gauss(r));
    if (len < m->o.min_len) len = m->o.min_len;
    if (len > m->o.max_len) len = m->o.max_len;
    p.len = (uint32_t)len;
    return p;
}

static uint32_t draw_word(const model *m, uint32_t topic, cm_rng *r)
{
    if (cm_rng_uniform(r) < P_TOPIC_WORD) {
        uint32_t j = sample_cdf(m->topic_cdf, TOPIC_WORDS, cm_rng_uniform(r));
        return m->topic_words[(size_t)topic * TOPIC_WORDS + j];
    }
    return sample_cdf(m->zipf_cdf, m->o.vocab, cm_rng_uniform(r));
}

/* token = normalise(word + topic_weight * topic + w_noise * u) */
static void embed(const model *m, uint32_t word, uint32_t topic, float w_noise, cm_rng *r,
                  float *out)
{
    uint32_t d = m->o.dim;
    const float *wv = m->words + (size_t)word * d, *tv = m->topics + (size_t)topic * d;
    random_unit(r, out, d);
    float wt = (float)m->o.topic_weight;
    for (uint32_t i = 0; i < d; i++) out[i] = wv[i] + wt * tv[i] + w_noise * out[i];
    normalise(out, d);
}

/* Generates document `doc` into out (plan.len x dim); words (optional) gets its words. */
static doc_plan gen_doc(const model *m, int64_t doc, float *out, uint32_t *words)
{
    cm_rng r;
    doc_plan p = plan_doc(m, doc, &r);
    for (uint32_t t = 0; t < p.len; t++) {
        uint32_t w = draw_word(m, p.topic, &r);
        if (words) words[t] = w;
        if (out) embed(m, w, p.topic, W_CONTEXT, &r, out + (size_t)t * m->o.dim);
    }
    return p;
}

static int64_t gen_query(const model *m, int64_t q, uint32_t *doc_words, float *out)
{
    cm_rng r;
    cm_rng_seed(&r, m->o.seed, (1ull << 40) + (uint64_t)q);
    int64_t target = (int64_t)cm_rng_below(&r, (uint64_t)m->o.n_docs);
    doc_plan p = gen_doc(m, target, NULL, doc_words);
    for (uint32_t t = 0; t < m->o.query_len; t++) {
        uint32_t w = (p.len > 0 && cm_rng_uniform(&r) < P_QUERY_DOC_WORD)
                         ? doc_words[cm_rng_below(&r, p.len)]
                         : draw_word(m, p.topic, &r);
        embed(m, w, p.topic, (float)m->o.query_noise, &r, out + (size_t)t * m->o.dim);
    }
    return target;
}

/* ---- in memory --------------------------------------------------------------------- */

void data_synth_free(data_synth_corpus *c)
{
    cm_free(c->tokens);
    cm_free(c->doclens);
    cm_free(c->queries);
    cm_free(c->target);
    memset(c, 0, sizeof *c);
}

chimera_status data_synth_generate(const chimera_synth_opts *opts, data_synth_corpus *out,
                                   chimera_error *err)
{
    memset(out, 0, sizeof *out);
    model m;
    CM_TRY(model_init(&m, opts, err));
    const chimera_synth_opts *o = &m.o;
    out->n_docs = o->n_docs;
    out->n_queries = o->n_queries;
    out->dim = o->dim;
    out->query_len = o->query_len;
    out->doclens = cm_malloc((size_t)(o->n_docs + 1) * sizeof *out->doclens);
    out->target = cm_malloc((size_t)(o->n_queries + 1) * sizeof *out->target);
    uint32_t *words = cm_malloc((size_t)o->max_len * sizeof *words);
    chimera_status s = CHIMERA_OK;
    if (!out->doclens || !out->target || !words) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "synth: out of memory");
        goto done;
    }
    for (int64_t i = 0; i < o->n_docs; i++) {
        cm_rng r;
        out->doclens[i] = plan_doc(&m, i, &r).len;
        out->n_tokens += out->doclens[i];
    }
    out->tokens = cm_malloc((size_t)(out->n_tokens + 1) * o->dim * sizeof(float));
    out->queries = cm_malloc((size_t)(o->n_queries * o->query_len + 1) * o->dim * sizeof(float));
    if (!out->tokens || !out->queries) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "synth: out of memory");
        goto done;
    }
    int64_t row = 0;
    for (int64_t i = 0; i < o->n_docs; i++) {
        gen_doc(&m, i, out->tokens + (size_t)row * o->dim, NULL);
        row += out->doclens[i];
    }
    for (int64_t q = 0; q < o->n_queries; q++)
        out->target[q] =
            gen_query(&m, q, words, out->queries + (size_t)q * o->query_len * o->dim);
done:
    cm_free(words);
    model_free(&m);
    if (s != CHIMERA_OK) data_synth_free(out);
    return s;
}

/* ---- to files ---------------------------------------------------------------------- */

/* The four files are written under temporary names (cm_writer) and renamed into place
 * only once all four are complete and synced: a failure (no memory, a full disk, an
 * impossible size) removes only our temporary files and leaves whatever the directory
 * held before untouched. */
chimera_status data_synth_write(const char *dir, const chimera_synth_opts *opts, chimera_error *err)
{
    model m;
    CM_TRY(model_init(&m, opts, err));
    const chimera_synth_opts *o = &m.o;
    if (o->n_docs == 0 || o->n_queries == 0) {
        model_free(&m);
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "synth: need at least one document and query");
    }
    chimera_status s = cm_mkdirs(dir, err);
    if (s != CHIMERA_OK) {
        model_free(&m);
        return s;
    }
    char *p_tok = cm_path_join(dir, "tokens.npy"), *p_len = cm_path_join(dir, "doclens.npy");
    char *p_q = cm_path_join(dir, "queries.npy"), *p_rel = cm_path_join(dir, "qrels.tsv");
    int64_t *lens = cm_malloc((size_t)o->n_docs * sizeof *lens);
    uint32_t *words = cm_malloc((size_t)o->max_len * sizeof *words);
    float *buf = cm_malloc((size_t)(o->max_len > o->query_len ? o->max_len : o->query_len) *
                           o->dim * sizeof(float));
    int64_t *target = cm_malloc((size_t)o->n_queries * sizeof *target);
    cm_writer w[4] = {{0}}; /* tokens, doclens, queries, qrels */
    if (!p_tok || !p_len || !p_q || !p_rel || !lens || !words || !buf || !target) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "synth: out of memory");
        goto done;
    }
    int64_t n_tokens = 0;
    for (int64_t i = 0; i < o->n_docs; i++) {
        cm_rng r;
        lens[i] = plan_doc(&m, i, &r).len;
        n_tokens += lens[i];
    }
    cm_progress prog;
    cm_progress_begin(&prog, o->progress, o->progress_user, "generate", (uint64_t)n_tokens);
    int64_t shape[3] = {n_tokens, o->dim, 0};
    s = cm_npy_begin(&w[0], p_tok, CM_F32, 2, shape, err);
    for (int64_t i = 0; i < o->n_docs && s == CHIMERA_OK; i++) {
        gen_doc(&m, i, buf, NULL);
        s = cm_writer_write(&w[0], buf, (size_t)lens[i] * o->dim * sizeof(float), err);
        cm_progress_add(&prog, (uint64_t)lens[i]);
    }
    if (s == CHIMERA_OK) s = cm_npy_end(&w[0], err);
    if (s != CHIMERA_OK) goto done;
    cm_progress_end(&prog);
    shape[0] = o->n_docs;
    s = cm_npy_begin(&w[1], p_len, CM_I64, 1, shape, err);
    if (s == CHIMERA_OK) s = cm_writer_write(&w[1], lens, (size_t)o->n_docs * sizeof *lens, err);
    if (s == CHIMERA_OK) s = cm_npy_end(&w[1], err);
    if (s != CHIMERA_OK) goto done;
    shape[0] = o->n_queries;
    shape[1] = o->query_len;
    shape[2] = o->dim;
    s = cm_npy_begin(&w[2], p_q, CM_F32, 3, shape, err);
    for (int64_t q = 0; q < o->n_queries && s == CHIMERA_OK; q++) {
        target[q] = gen_query(&m, q, words, buf);
        s = cm_writer_write(&w[2], buf, (size_t)o->query_len * o->dim * sizeof(float), err);
    }
    if (s == CHIMERA_OK) s = cm_npy_end(&w[2], err);
    if (s != CHIMERA_OK) goto done;
    s = cm_writer_open(&w[3], p_rel, err);
    for (int64_t q = 0; q < o->n_queries && s == CHIMERA_OK; q++)
        s = cm_writer_printf(&w[3], err, "%lld 0 %lld 1\n", (long long)q, (long long)target[q]);
    if (s == CHIMERA_OK) s = cm_writer_sync(&w[3], err);
    /* All four complete: rename them in. Only a failing rename within one directory can
     * stop this part way, and it names the file. */
    for (int i = 0; i < 4 && s == CHIMERA_OK; i++) s = cm_writer_commit(&w[i], err);
done:
    for (int i = 0; i < 4; i++) cm_writer_abort(&w[i]); /* removes only our temporary files */
    cm_free(p_tok);
    cm_free(p_len);
    cm_free(p_q);
    cm_free(p_rel);
    cm_free(lens);
    cm_free(words);
    cm_free(buf);
    cm_free(target);
    model_free(&m);
    return s;
}
