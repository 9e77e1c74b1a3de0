/* Tuned search profiles in the manifest (profile.h). The profile is file content, so
 * reading it is as careful as reading any other part of an index: every value is
 * range-checked as a double before it is converted. Saving goes through the writer
 * protocol of store.h, whose edit callback merges the profile into what the index holds
 * at the moment the lock is taken. */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "index/profile.h"
#include "index/store.h"

/* The members in file order (kept from the first format that stored profiles, so
 * manifests written before and after read the same). */
static cJSON *profile_json(const ix_profile *p)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddNumberToObject(o, "k", p->k);
    cJSON_AddNumberToObject(o, "target_recall", p->target_recall);
    cJSON_AddNumberToObject(o, "measured_recall", p->measured_recall);
    cJSON_AddNumberToObject(o, "qps", p->qps);
    cJSON_AddNumberToObject(o, "reached", p->reached);
    cJSON_AddNumberToObject(o, "n_probe", p->params.n_probe);
    cJSON_AddNumberToObject(o, "k_refine", p->params.k_refine);
    cJSON_AddNumberToObject(o, "k_fullbit", p->params.k_fullbit);
    cJSON_AddNumberToObject(o, "chunks", p->params.chunks);
    cJSON_AddNumberToObject(o, "impute", p->params.impute);
    cJSON_AddNumberToObject(o, "probe", p->params.probe);
    /* since 0.4.0, only when set: a profile without re-rank reads the same to any reader */
    if (p->params.rerank_depth) cJSON_AddNumberToObject(o, "rerank_depth", p->params.rerank_depth);
    /* since 0.6.0, only when on (below k_refine) */
    if (p->params.k_interaction && p->params.k_interaction < p->params.k_refine)
        cJSON_AddNumberToObject(o, "k_interaction", p->params.k_interaction);
    /* since 0.7.0, the floor's scale the tune measured with */
    if (p->params.impute_scale > 0) cJSON_AddNumberToObject(o, "impute_scale", p->params.impute_scale);
    return o;
}

/* A number member, or -1 when it is missing or not a number. */
static double jnum(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : -1;
}

void ix_profile_identity(const ix_index *ix, uint64_t *generation, uint64_t *data_id)
{
    *generation = ix_store_generation(ix->st);
    *data_id = ix_store_data_id(ix->st);
}

typedef struct profile_edit {
    const char *dir;
    const ix_profile *p;
    uint64_t data_id, generation;
} profile_edit;

/* Under the writer lock (ix_store_update_meta): merges the profile into the profiles the
 * index holds now. Merging rather than failing on any change since the tune is what
 * keeps two tunes saving at once from losing one: a meta-only change (another profile)
 * leaves the data the profile was measured on as it was. A change of the data (a
 * rebuild) makes the profile meaningless for this index, so that is refused. */
static chimera_status profile_merge(cJSON *meta, const store *cur, void *user, chimera_error *err)
{
    const profile_edit *e = user;
    if (e->data_id && e->data_id != ix_store_data_id(cur))
        return cm_fail(err, CHIMERA_ERR_CONFLICT,
                       "%s was rebuilt since it was tuned (generation %llu then, %llu now, "
                       "with other data); the profile was not saved: tune the new index",
                       e->dir, (unsigned long long)e->generation,
                       (unsigned long long)ix_store_generation(cur));
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(meta, "profiles");
    if (!cJSON_IsArray(arr)) {
        cJSON_DeleteItemFromObjectCaseSensitive(meta, "profiles");
        arr = cJSON_AddArrayToObject(meta, "profiles");
    }
    /* replace the profile with the same (k, target) */
    for (int i = cJSON_GetArraySize(arr) - 1; i >= 0; i--) {
        const cJSON *p = cJSON_GetArrayItem(arr, i);
        if (jnum(p, "k") == e->p->k && jnum(p, "target_recall") == e->p->target_recall)
            cJSON_DeleteItemFromArray(arr, i);
    }
    cJSON *p = profile_json(e->p);
    if (!arr || !p || !cJSON_AddItemToArray(arr, p)) {
        cJSON_Delete(p);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "profile_save: out of memory");
    }
    return CHIMERA_OK;
}

chimera_status ix_profile_save(const char *dir, const ix_profile *p, uint64_t data_id,
                               uint64_t generation, chimera_error *err)
{
    profile_edit e = {dir, p, data_id, generation};
    return ix_store_update_meta(dir, NULL, profile_merge, &e, err);
}

/* Measured on other documents: once a fifth of the index changed (update.c counts
 * changed_docs), a profile's recall is no longer a promise. */
static int profile_stale(const ix_index *ix, const cJSON *o)
{
    return jnum(o, "changed_docs") > 0.2 * (double)(ix->n_docs - ix->n_deleted);
}

/* The settings of the stored profile o (of k pk, target pt), each value range-checked. */
static chimera_status profile_params(const cJSON *o, double pk, double pt,
                                     chimera_search_params *out, chimera_error *err)
{
    /* Converting a double outside the integer's range (1e300, -5, or the -1 jnum gives
     * for a missing member) is undefined behaviour, hence the checks first. */
    static const struct {
        const char *key;
        double max;
    } field[] = {{"n_probe", 1 << 24}, {"k_refine", 1 << 24}, {"k_fullbit", 1 << 24},
                 {"chunks", 64},        {"impute", 2},         {"probe", 2}}; /* as a search takes */
    double v[6];
    for (int i = 0; i < 6; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, field[i].key);
        v[i] = cJSON_IsNumber(f) ? f->valuedouble : -1;
        if (!(v[i] >= 0 && v[i] <= field[i].max) || v[i] != floor(v[i]))
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "profile (k %g, target %g): '%s' is %s, expected an integer in 0..%.0f",
                           pk, pt, field[i].key, cJSON_IsNumber(f) ? "out of range" : "missing",
                           field[i].max);
    }
    memset(out, 0, sizeof *out);
    out->n_probe = (uint32_t)v[0];
    out->k_refine = (uint32_t)v[1];
    out->k_fullbit = (uint32_t)v[2];
    out->chunks = (uint32_t)v[3];
    out->impute = (int)v[4];
    out->probe = (int)v[5];
    /* optional (absent: 0, off); a profile that re-ranks needs the index's vectors, which
     * a search checks */
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(o, "rerank_depth");
    if (rd) {
        double x = cJSON_IsNumber(rd) ? rd->valuedouble : -1;
        if (!(x >= 0 && x <= (double)(1u << 24)) || x != floor(x))
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "profile (k %g, target %g): 'rerank_depth' is %s, expected an integer "
                           "in 0..%u", pk, pt, cJSON_IsNumber(rd) ? "out of range" : "not a number",
                           1u << 24);
        out->rerank_depth = (uint32_t)x;
    }
    /* optional; absent: off, said explicitly (k_interaction = k_refine), so that a search
     * does not take the index's calibrated value for a profile tuned without it */
    out->k_interaction = out->k_refine;
    const cJSON *ki = cJSON_GetObjectItemCaseSensitive(o, "k_interaction");
    if (ki) {
        double x = cJSON_IsNumber(ki) ? ki->valuedouble : -1;
        if (!(x >= 1 && x <= (double)(1u << 24)) || x != floor(x))
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "profile (k %g, target %g): 'k_interaction' is %s, expected an "
                           "integer in 1..%u", pk, pt,
                           cJSON_IsNumber(ki) ? "out of range" : "not a number", 1u << 24);
        out->k_interaction = (uint32_t)x;
    }
    /* optional; absent (a profile from before 0.7.0, tuned with the unscaled floor): 1 */
    out->impute_scale = 1.0f;
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(o, "impute_scale");
    if (sc) {
        double x = cJSON_IsNumber(sc) ? sc->valuedouble : -1;
        if (!(x > 0 && x <= 1))
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "profile (k %g, target %g): 'impute_scale' is %s, expected a value in "
                           "(0, 1]", pk, pt, cJSON_IsNumber(sc) ? "out of range" : "not a number");
        out->impute_scale = (float)x;
    }
    return CHIMERA_OK;
}

/* The reached, fresh profile a search for top-k at target_recall takes: this k first,
 * then the smallest target that is enough, then the smallest k' >= k; NULL when none
 * (*stale counts the fresh-enough candidates skipped as stale). */
static const cJSON *profile_best(const ix_index *ix, uint32_t k, double target_recall,
                                 int *stale)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(ix_store_meta(ix->st), "profiles");
    const cJSON *best = NULL, *it;
    double best_t = 2, best_k = 1e18;
    *stale = 0;
    cJSON_ArrayForEach(it, arr)
    {
        double pk = jnum(it, "k"), pt = jnum(it, "target_recall");
        if (pk < k || pt < target_recall || jnum(it, "reached") != 1) continue;
        if (profile_stale(ix, it)) {
            (*stale)++;
            continue;
        }
        int better = !best || (pk == k && best_k != k) ||
                     ((pk == k) == (best_k == k) && (pt < best_t || (pt == best_t && pk < best_k)));
        if (better) {
            best = it;
            best_t = pt;
            best_k = pk;
        }
    }
    return best;
}

chimera_status ix_profile_find(const ix_index *ix, uint32_t k, double target_recall,
                               chimera_search_params *out, chimera_error *err)
{
    int stale;
    const cJSON *best = profile_best(ix, k, target_recall, &stale);
    if (!best) {
        if (stale)
            cm_fail(err, CHIMERA_ERR_EMPTY,
                    "the tuned profile for k=%u at recall >= %.3f is stale: more than a fifth of "
                    "the documents changed since it was tuned; run chimera tune again", k,
                    target_recall);
        return CHIMERA_ERR_EMPTY;
    }
    return profile_params(best, jnum(best, "k"), jnum(best, "target_recall"), out, err);
}

/* Whether the stored entry o reads as a profile, into *e (ix_profile_list's entries). */
static int profile_entry(const ix_index *ix, const cJSON *o, chimera_profile_entry *e)
{
    double pk = jnum(o, "k"), pt = jnum(o, "target_recall");
    memset(e, 0, sizeof *e);
    if (!(pk >= 1 && pk <= (double)(1u << 24)) || !(pt > 0 && pt <= 1) ||
        profile_params(o, pk, pt, &e->params, NULL) != CHIMERA_OK)
        return 0;
    e->k = (uint32_t)pk;
    e->target_recall = pt;
    e->measured_recall = jnum(o, "measured_recall");
    e->qps = jnum(o, "qps");
    e->reached = jnum(o, "reached") == 1;
    e->stale = profile_stale(ix, o);
    return 1;
}

int ix_profile_pick(const ix_index *ix, uint32_t k, double target_recall)
{
    int stale, n = 0;
    const cJSON *best = profile_best(ix, k, target_recall, &stale), *it;
    chimera_profile_entry e;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(ix_store_meta(ix->st), "profiles"))
    {
        int listed = profile_entry(ix, it, &e);
        if (it == best) return listed ? n : -1; /* damaged: the search fails on it */
        n += listed;
    }
    return -1;
}

int ix_profile_list(const ix_index *ix, chimera_profile_entry *out, int max)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(ix_store_meta(ix->st), "profiles");
    const cJSON *it;
    int n = 0;
    cJSON_ArrayForEach(it, arr)
    {
        /* an entry that does not read as a profile is not listed (a search that would
         * take it fails, naming the damaged value: ix_profile_find) */
        chimera_profile_entry e;
        if (!profile_entry(ix, it, &e)) continue;
        if (n < max && out) out[n] = e;
        n++;
    }
    return n;
}
