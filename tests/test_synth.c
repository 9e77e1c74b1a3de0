/* The synthetic corpus must behave like contextual token embeddings, not uniform
 * noise, and be reproducible: tokens are unit vectors; the same seed gives identical
 * output and another seed a different one; lengths vary within [min_len, max_len];
 * tokens of one document are more alike than tokens of two random documents (topics);
 * most tokens have a near duplicate in other documents (recurring words, which is what
 * makes fine-grained IVF clusters meaningful), far above what random unit vectors show;
 * and queries find their target document by exact Chamfer search far above chance. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "data/synth.h"
#include "search/exact.h"
#include "core/alloc.h"

static double dot(const float *a, const float *b, uint32_t d)
{
    double s = 0;
    for (uint32_t i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}

int main(void)
{
    chimera_synth_opts o = {.n_docs = 600, .dim = 64, .n_queries = 40, .seed = 3};
    data_synth_corpus a, b, c;
    chimera_error err;
    CHECK_OK(data_synth_generate(&o, &a, &err), &err);
    CHECK_OK(data_synth_generate(&o, &b, &err), &err);
    o.seed = 4;
    CHECK_OK(data_synth_generate(&o, &c, &err), &err);
    CHECK(a.n_tokens == b.n_tokens);
    CHECK(memcmp(a.tokens, b.tokens, (size_t)a.n_tokens * a.dim * sizeof(float)) == 0);
    CHECK(memcmp(a.queries, b.queries, (size_t)a.n_queries * a.query_len * a.dim * 4) == 0);
    CHECK(a.n_tokens != c.n_tokens || memcmp(a.tokens, c.tokens, 64 * sizeof(float)) != 0);

    int unit = 1;
    for (int64_t t = 0; t < a.n_tokens; t++) unit &= fabs(dot(a.tokens + t * 64, a.tokens + t * 64, 64) - 1) < 1e-4;
    CHECK(unit);
    int64_t mn = 1 << 30, mx = 0;
    for (int64_t i = 0; i < a.n_docs; i++) {
        mn = a.doclens[i] < mn ? a.doclens[i] : mn;
        mx = a.doclens[i] > mx ? a.doclens[i] : mx;
    }
    CHECK(mn >= 16 && mx <= 300 && mx > 3 * mn);

    /* within-document vs across-document similarity */
    int64_t *off = cm_malloc((size_t)(a.n_docs + 1) * sizeof *off);
    off[0] = 0;
    for (int64_t i = 0; i < a.n_docs; i++) off[i + 1] = off[i] + a.doclens[i];
    cm_rng r;
    cm_rng_seed(&r, 1, 0);
    double within = 0, across = 0;
    for (int s = 0; s < 4000; s++) {
        int64_t d = (int64_t)cm_rng_below(&r, (uint64_t)a.n_docs), e = (int64_t)cm_rng_below(&r, (uint64_t)a.n_docs);
        int64_t t1 = off[d] + (int64_t)cm_rng_below(&r, (uint64_t)a.doclens[d]);
        int64_t t2 = off[d] + (int64_t)cm_rng_below(&r, (uint64_t)a.doclens[d]);
        int64_t t3 = off[e] + (int64_t)cm_rng_below(&r, (uint64_t)a.doclens[e]);
        within += dot(a.tokens + t1 * 64, a.tokens + t2 * 64, 64);
        across += dot(a.tokens + t1 * 64, a.tokens + t3 * 64, 64);
    }
    CHECKF(within / 4000 > across / 4000 + 0.05, "within %.3f vs across %.3f", within / 4000, across / 4000);

    /* recurring words: nearest neighbour among 5000 tokens of other documents */
    int near_dup = 0;
    for (int s = 0; s < 200; s++) {
        int64_t t = (int64_t)cm_rng_below(&r, (uint64_t)a.n_tokens);
        double best = -1;
        for (int64_t u = 0; u < 5000 && u < a.n_tokens; u++)
            if (u != t) {
                double x = dot(a.tokens + t * 64, a.tokens + u * 64, 64);
                best = x > best ? x : best;
            }
        near_dup += best > 0.6;
    }
    /* random unit vectors in 64-d: max of 5000 cosines is ~0.5; the words make most
     * a large share of tokens (~55% here) have a neighbour well above that */
    CHECKF(near_dup > 80, "only %d of 200 tokens have a neighbour above 0.6", near_dup);

    /* queries retrieve their target */
    data_corpus dc;
    data_queries dq;
    CHECK_OK(data_corpus_wrap(&dc, a.tokens, a.n_tokens, a.dim, a.doclens, a.n_docs, NULL, NULL, &err), &err);
    CHECK_OK(data_queries_new(&dq, a.queries, a.n_queries, a.dim, NULL, a.query_len, &err), &err);
    int64_t ids[40 * 10];
    float sc[40 * 10];
    CHECK_OK(sp_exact_search(&dc, &dq, 10, 1, NULL, NULL, ids, sc, &err), &err);
    int found = 0;
    for (int q = 0; q < 40; q++)
        for (int k = 0; k < 10; k++) found += ids[q * 10 + k] == a.target[q];
    CHECKF(found >= 20, "only %d of 40 targets in the top 10 (chance: 0.7)", found);
    data_queries_free(&dq);
    data_corpus_free(&dc);
    cm_free(off);
    data_synth_free(&a);
    data_synth_free(&b);
    data_synth_free(&c);
    return check_report();
}
