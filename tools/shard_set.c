/* A layout's shards searched as one index (shards.h: shard_set). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shards.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int shard_set_open(const char *dir, int stride, int offset, shard_set *set, chimera_error *err)
{
    memset(set, 0, sizeof *set);
    if (shards_read(dir, &set->layout, err)) return 1;
    const int n = set->layout.n_shards;
    set->which = calloc((size_t)n, sizeof *set->which);
    set->ix = calloc((size_t)n, sizeof *set->ix);
    if (!set->which || !set->ix) {
        shard_set_close(set);
        err->code = CHIMERA_ERR_NOMEM;
        strcpy(err->msg, "out of memory");
        return 1;
    }
    for (int s = 0; s < n; s++) {
        if (s % stride != offset) continue;
        if (chimera_index_open(set->layout.shards[s].dir, NULL, &set->ix[set->n_open], err) !=
            CHIMERA_OK) {
            shard_set_close(set);
            return 1;
        }
        set->which[set->n_open++] = s;
    }
    return 0;
}

void shard_profile_add(chimera_search_profile *t, const chimera_search_profile *p)
{
    t->t_generate += p->t_generate;
    t->t_refine += p->t_refine;
    t->t_score1 += p->t_score1;
    t->t_fullbit += p->t_fullbit;
    t->t_fullbit_wait += p->t_fullbit_wait;
    t->t_rerank += p->t_rerank;
    t->n_reranked += p->n_reranked;
    t->t_interaction += p->t_interaction;
    t->n_scored1 += p->n_scored1;
    t->n_rows += p->n_rows;
    t->n_probed += p->n_probed;
    t->n_walked += p->n_walked;
    t->tokens_refined += p->tokens_refined;
    t->docs_touched += p->docs_touched;
    t->n_refined += p->n_refined;
    t->n_fullbit += p->n_fullbit;
    t->bytes_up += p->bytes_up;
    t->bytes_down += p->bytes_down;
    if (p->backend[0]) memcpy(t->backend, p->backend, sizeof t->backend);
}

chimera_status shard_set_search(shard_set *set, const chimera_queries *q, uint32_t k,
                                const chimera_search_params *params,
                                const chimera_search_opts *opts, int64_t *ids, float *scores,
                                chimera_search_profile *profile, chimera_error *err)
{
    const int64_t nq = chimera_queries_count(q);
    const int ns = set->n_open;
    double t0 = now();
    double *lat = profile ? profile->latency : NULL;
    if (lat) memset(lat, 0, (size_t)nq * sizeof *lat);
    chimera_search_profile sum = {0};
    if (ns == 0 || (ns == 1 && chimera_index_n_docs(set->ix[0]) == 0)) {
        for (int64_t i = 0; i < nq * (int64_t)k; i++) ids[i] = -1, scores[i] = -INFINITY;
        if (profile) {
            sum.latency = lat;
            sum.seconds = now() - t0;
            *profile = sum;
        }
        return CHIMERA_OK;
    }
    if (ns == 1) { /* one shard: its lists are the answer */
        sum.latency = lat;
        chimera_status s = chimera_index_search(set->ix[0], q, k, params, opts, ids, scores,
                                                profile ? &sum : NULL, err);
        if (s == CHIMERA_OK && profile) *profile = sum;
        return s;
    }
    /* every shard's lists, list-major: shard j's query i at [(j * nq + i) * k] */
    int64_t *all_ids = malloc((size_t)nq * ns * k * sizeof *all_ids);
    float *all_sc = malloc((size_t)nq * ns * k * sizeof *all_sc);
    double *one_lat = lat ? malloc((size_t)nq * sizeof *one_lat) : NULL;
    chimera_status s = CHIMERA_OK;
    if (!all_ids || !all_sc || (lat && !one_lat)) goto nomem;
    for (int j = 0; j < ns; j++) {
        int64_t *sid = all_ids + (size_t)j * nq * k;
        float *ssc = all_sc + (size_t)j * nq * k;
        if (chimera_index_n_docs(set->ix[j]) == 0) {
            /* every document of this shard deleted: it contributes nothing */
            for (int64_t i = 0; i < nq * (int64_t)k; i++) sid[i] = -1, ssc[i] = -INFINITY;
            continue;
        }
        chimera_search_profile p = {.latency = one_lat};
        s = chimera_index_search(set->ix[j], q, k, params, opts, sid, ssc, profile ? &p : NULL, err);
        if (s != CHIMERA_OK) goto done;
        if (profile) shard_profile_add(&sum, &p);
        for (int64_t i = 0; lat && i < nq; i++) lat[i] += one_lat[i];
    }
    if (shards_merge_all(ns, nq, k, all_ids, all_sc, ids, scores) != 0) goto nomem;
    if (profile) {
        sum.latency = lat;
        sum.seconds = now() - t0;
        *profile = sum;
    }
    goto done;
nomem:
    s = CHIMERA_ERR_NOMEM;
    err->code = s;
    strcpy(err->msg, "out of memory");
done:
    free(all_ids);
    free(all_sc);
    free(one_lat);
    return s;
}

void shard_set_close(shard_set *set)
{
    for (int i = 0; set->ix && i < set->n_open; i++) chimera_index_close(set->ix[i]);
    free(set->ix);
    free(set->which);
    shards_free(&set->layout);
    memset(set, 0, sizeof *set);
}
