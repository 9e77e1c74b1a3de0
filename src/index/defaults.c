/* Calibrated defaults and the recorded source in the manifest (defaults.h). Every value
 * read is range-checked as a double before it is converted, as profile.c does: the
 * manifest is file content. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "index/defaults.h"
#include "index/store.h"
#include "core/alloc.h"

static double jnum(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : -1;
}

static void jset(cJSON *o, const char *key, double v)
{
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    cJSON_AddNumberToObject(o, key, v);
}

int ix_defaults_to_meta(cJSON *meta, const ix_defaults *d)
{
    if (d->n == 0) return 1;
    cJSON *o = cJSON_AddObjectToObject(meta, "defaults");
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "settings") : NULL;
    if (!arr) return 0;
    cJSON_AddNumberToObject(o, "target_recall", d->target);
    cJSON_AddNumberToObject(o, "queries", (double)d->n_queries);
    cJSON_AddNumberToObject(o, "seconds", d->seconds);
    cJSON_AddNumberToObject(o, "changed_docs", 0);
    for (int i = 0; i < d->n; i++) {
        const ix_default *e = &d->d[i];
        cJSON *s = cJSON_CreateObject();
        if (!s || !cJSON_AddItemToArray(arr, s)) {
            cJSON_Delete(s);
            return 0;
        }
        cJSON_AddNumberToObject(s, "k", e->k);
        cJSON_AddNumberToObject(s, "n_probe", e->params.n_probe);
        cJSON_AddNumberToObject(s, "k_refine", e->params.k_refine);
        cJSON_AddNumberToObject(s, "k_fullbit", e->params.k_fullbit);
        cJSON_AddNumberToObject(s, "chunks", e->params.chunks);
        /* written only when on: a library without centroid interaction, which ignores the
         * key, then searches with every refined document 1-bit scored (more recall) */
        if (e->params.k_interaction)
            cJSON_AddNumberToObject(s, "k_interaction", e->params.k_interaction);
        /* written only when calibrated: absent reads as the unscaled floor */
        if (e->params.impute_scale > 0)
            cJSON_AddNumberToObject(s, "impute_scale", e->params.impute_scale);
        cJSON_AddNumberToObject(s, "recall", e->recall);
        cJSON_AddNumberToObject(s, "recall_low", e->recall_low);
        cJSON_AddNumberToObject(s, "reached", e->reached);
    }
    return 1;
}

static cJSON *file_record(cJSON *src, const char *key, const char *path)
{
    char abs[PATH_MAX];
    struct stat st;
    if (!realpath(path, abs) || stat(abs, &st) != 0) return NULL;
    cJSON *o = cJSON_AddObjectToObject(src, key);
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "path", abs);
    cJSON_AddNumberToObject(o, "bytes", (double)st.st_size);
    /* seconds and nanoseconds apart: together they pass 2^53, beyond a JSON integer */
    cJSON_AddNumberToObject(o, "mtime_s", (double)st.st_mtim.tv_sec);
    cJSON_AddNumberToObject(o, "mtime_nsec", (double)st.st_mtim.tv_nsec);
    return o;
}

int ix_source_to_meta(cJSON *meta, const char *tokens, const char *doclens, const char *ids)
{
    if (!tokens || !doclens) return 1;
    cJSON *src = cJSON_CreateObject();
    if (!src) return 0;
    /* a file that cannot be resolved now could not be checked later: no source */
    if (!file_record(src, "tokens", tokens) || !file_record(src, "doclens", doclens) ||
        (ids && !file_record(src, "ids", ids))) {
        cJSON_Delete(src);
        return 1;
    }
    cJSON_AddNumberToObject(src, "changed_docs", 0);
    return cJSON_AddItemToObject(meta, "source", src);
}

void ix_defaults_note_change(cJSON *meta, int64_t changed)
{
    static const char *const keys[] = {"defaults", "source"};
    for (int i = 0; i < 2; i++) {
        cJSON *o = cJSON_GetObjectItemCaseSensitive(meta, keys[i]);
        if (!cJSON_IsObject(o)) continue;
        double prev = jnum(o, "changed_docs");
        jset(o, "changed_docs", (prev > 0 ? prev : 0) + (double)changed);
    }
}

void ix_defaults_read(const cJSON *meta, int64_t live_docs, ix_defaults *out, int *stale)
{
    memset(out, 0, sizeof *out);
    *stale = 0;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(meta, "defaults"), *it;
    if (!cJSON_IsObject(o)) return;
    double t = jnum(o, "target_recall"), q = jnum(o, "queries"), s = jnum(o, "seconds");
    out->target = t > 0 && t <= 1 ? t : 0;
    out->n_queries = q >= 0 && q < 1e15 ? (int64_t)q : 0;
    out->seconds = s >= 0 ? s : 0;
    *stale = jnum(o, "changed_docs") > 0.2 * (double)live_docs;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(o, "settings"))
    {
        if (out->n == IX_MAX_DEFAULTS) break;
        static const char *const key[] = {"k", "n_probe", "k_refine", "k_fullbit", "chunks"};
        double v[5];
        int ok = 1;
        for (int i = 0; i < 5 && ok; i++) {
            v[i] = jnum(it, key[i]);
            /* k_refine is bounded by the search (2^24), chunks by 64 */
            ok = v[i] >= (i == 4 ? 0 : 1) && v[i] <= (i == 4 ? 64 : 1 << 24) && v[i] == floor(v[i]);
        }
        double r = jnum(it, "recall"), lo = jnum(it, "recall_low"), re = jnum(it, "reached");
        /* optional (0 when absent: off) */
        double ki = cJSON_HasObjectItem(it, "k_interaction") ? jnum(it, "k_interaction") : 0;
        ok = ok && ki >= 0 && ki <= 1 << 24 && ki == floor(ki);
        double sc = cJSON_HasObjectItem(it, "impute_scale") ? jnum(it, "impute_scale") : 0;
        ok = ok && (sc == 0 || (sc > 0 && sc <= 1));
        if (!ok || !(r >= 0 && r <= 1) || !(lo >= 0 && lo <= 1)) continue;
        /* kept in increasing k: a search takes the first k' >= its k */
        if (out->n && v[0] <= out->d[out->n - 1].k) continue;
        ix_default *e = &out->d[out->n++];
        memset(e, 0, sizeof *e);
        e->k = (uint32_t)v[0];
        e->params.n_probe = (uint32_t)v[1];
        e->params.k_refine = (uint32_t)v[2];
        e->params.k_fullbit = (uint32_t)v[3];
        e->params.chunks = (uint32_t)v[4];
        e->params.k_interaction = (uint32_t)ki;
        e->params.impute_scale = (float)sc;
        e->recall = r;
        e->recall_low = lo;
        e->reached = re == 1;
    }
}

int ix_defaults_find(const ix_index *ix, uint32_t k, chimera_search_params *out)
{
    ix_defaults d;
    int stale;
    ix_defaults_read(ix_store_meta(ix->st), ix->n_docs - ix->n_deleted, &d, &stale);
    if (stale || d.n == 0) return 0;
    for (int i = 0; i < d.n; i++)
        if (d.d[i].k >= k) {
            *out = d.d[i].params;
            return 1;
        }
    /* a larger k than any calibrated: the largest one's probing, and re-scoring depths
     * grown in proportion to k (what the fixed defaults do too) */
    const ix_default *e = &d.d[d.n - 1];
    *out = e->params;
    double f = (double)k / e->k;
    double kf = e->params.k_fullbit * f, kr = e->params.k_refine * f;
    double ki = e->params.k_interaction * f;
    out->k_fullbit = kf < (1 << 24) ? (uint32_t)kf : (1u << 24);
    out->k_refine = kr < (1 << 24) ? (uint32_t)kr : (1u << 24);
    out->k_interaction = ki < (1 << 24) ? (uint32_t)ki : (1u << 24);
    return 1;
}

static chimera_status source_path(const cJSON *src, const char *key, int required, char **out,
                                  chimera_error *err)
{
    *out = NULL;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(src, key);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "path");
    if (!cJSON_IsString(p)) {
        if (!required && !o) return CHIMERA_OK;
        return cm_fail(err, CHIMERA_ERR_EMPTY, "the index's recorded source lacks its %s file",
                       key);
    }
    struct stat st;
    if (stat(p->valuestring, &st) != 0)
        return cm_fail(err, CHIMERA_ERR_CONFLICT,
                       "the index's source %s file %s is gone (%s): pass the corpus with "
                       "--tokens/--doclens", key, p->valuestring, strerror(errno));
    if ((double)st.st_size != jnum(o, "bytes") || (double)st.st_mtim.tv_sec != jnum(o, "mtime_s") ||
        (double)st.st_mtim.tv_nsec != jnum(o, "mtime_nsec"))
        return cm_fail(err, CHIMERA_ERR_CONFLICT,
                       "the index's source %s file %s changed since the build (size or "
                       "modification time): pass the corpus the index holds with "
                       "--tokens/--doclens", key, p->valuestring);
    *out = cm_malloc(strlen(p->valuestring) + 1);
    if (!*out) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    strcpy(*out, p->valuestring);
    return CHIMERA_OK;
}

int ix_source_state(const cJSON *meta, int64_t n_deleted)
{
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(meta, "source");
    if (!cJSON_IsObject(src)) return 0;
    return jnum(src, "changed_docs") != 0 || n_deleted != 0 ? 2 : 1;
}

chimera_status ix_source_get(const ix_index *ix, char **tokens, char **doclens, char **ids,
                             chimera_error *err)
{
    *tokens = *doclens = *ids = NULL;
    const cJSON *meta = ix_store_meta(ix->st);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(meta, "source");
    int state = ix_source_state(meta, ix->n_deleted);
    if (state == 0)
        return cm_fail(err, CHIMERA_ERR_EMPTY,
                       "the index records no source corpus (built from memory, or by an "
                       "older version): pass the corpus with --tokens/--doclens");
    if (state == 2)
        return cm_fail(err, CHIMERA_ERR_CONFLICT,
                       "documents were added, deleted or updated since the index was built "
                       "from its source: exact truth over the source would be wrong; pass "
                       "the documents the index holds now with --tokens/--doclens/--ids");
    chimera_status s = source_path(src, "tokens", 1, tokens, err);
    if (s == CHIMERA_OK) s = source_path(src, "doclens", 1, doclens, err);
    if (s == CHIMERA_OK) s = source_path(src, "ids", 0, ids, err);
    if (s != CHIMERA_OK) {
        cm_free(*tokens);
        cm_free(*doclens);
        cm_free(*ids);
        *tokens = *doclens = *ids = NULL;
    }
    return s;
}
