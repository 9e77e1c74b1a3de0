/* `chimera info`: what an index holds, from its manifest alone (ix_store_info maps
 * nothing), so it is instant on indexes of any size and works on damaged ones as far
 * as their manifest is readable. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "index/defaults.h"
#include "index/index.h"
#include "index/store.h"
#include "core/alloc.h"

int ix_section_on_device(const char *name)
{
    const ix_section_def *sec = ix_section_find(name);
    return sec ? sec->on_device : 1;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : 0;
}

/* A count from the meta, range-checked while it is still a double: converting a double
 * outside the target type's range (1e300, -5, NaN) to an integer is undefined
 * behaviour, so the check has to come before the cast. Absent members read as 0 (info
 * shows what a partial manifest has); present ones that are not integers in [0, max]
 * are refused, naming the member. `max` must be exactly representable as a double. */
static chimera_status count(const cJSON *o, const char *where, const char *key, double max,
                            double *v, chimera_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *v = 0;
    if (!it) return CHIMERA_OK;
    if (!cJSON_IsNumber(it))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index manifest: %s.%s is not a number", where,
                       key);
    double x = it->valuedouble;
    if (!(x >= 0 && x <= max) || x != floor(x))
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index manifest: %s.%s = %.17g, expected an integer in 0..%.0f", where, key,
                       x, max);
    *v = x;
    return CHIMERA_OK;
}

chimera_status ix_peek(const char *dir, uint64_t *generation, uint64_t *data_id,
                       chimera_error *err)
{
    store *st;
    CM_TRY(ix_store_info(dir, &st, err));
    *generation = ix_store_generation(st);
    *data_id = ix_store_data_id(st);
    ix_store_close(st);
    return CHIMERA_OK;
}

chimera_status ix_info(const char *dir, chimera_index_info *info, chimera_error *err)
{
    memset(info, 0, sizeof *info);
    store *st;
    CM_TRY(ix_store_info(dir, &st, err));
    const cJSON *man = ix_store_manifest(st), *meta = ix_store_meta(st);
    ix_store_format_version(st, &info->format_major, &info->format_minor);
    info->generation = ix_store_generation(st);
    const cJSON *lv = cJSON_GetObjectItemCaseSensitive(man, "library_version");
    if (cJSON_IsString(lv))
        snprintf(info->library_version, sizeof info->library_version, "%s", lv->valuestring);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(meta, "postings");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(meta, "build");
    double v[13];
    chimera_status s = CHIMERA_OK;
    int nv = 0;
#define COUNT(obj, where, key, max)                                                            \
    if (s == CHIMERA_OK) s = count(obj, where, key, max, &v[nv++], err)
    COUNT(meta, "meta", "dim", UINT32_MAX);
    COUNT(meta, "meta", "dim_pad", UINT32_MAX);
    COUNT(meta, "meta", "bits", UINT32_MAX);
    COUNT(meta, "meta", "n_clusters", UINT32_MAX);
    COUNT(meta, "meta", "graph_degree", UINT32_MAX);
    COUNT(meta, "meta", "n_docs", FMT_MAX_JSON_INT /* 2^53: exact in a double, fits int64_t */);
    COUNT(meta, "meta", "n_tokens", FMT_MAX_JSON_INT);
    COUNT(p, "meta.postings", "min", FMT_MAX_JSON_INT);
    COUNT(p, "meta.postings", "median", FMT_MAX_JSON_INT);
    COUNT(p, "meta.postings", "max", FMT_MAX_JSON_INT);
    COUNT(p, "meta.postings", "empty", UINT32_MAX);
    COUNT(b, "meta.build", "threads", INT32_MAX);
    COUNT(b, "meta.build", "peak_rss_bytes", FMT_MAX_JSON_INT);
#undef COUNT
    if (s != CHIMERA_OK) {
        ix_store_close(st);
        cm_fail_prefix(err, "%s", dir);
        return s;
    }
    info->dim = (uint32_t)v[0];
    info->dim_pad = (uint32_t)v[1];
    info->bits = (uint32_t)v[2];
    info->n_clusters = (uint32_t)v[3];
    info->graph_degree = (uint32_t)v[4];
    info->n_docs = (int64_t)v[5];
    info->n_tokens = (int64_t)v[6];
    info->list_min = (int64_t)v[7];
    info->list_median = (int64_t)v[8];
    info->list_max = (int64_t)v[9];
    info->list_empty = (uint32_t)v[10];
    info->build_threads = (int)v[11];
    info->build_peak_rss = (uint64_t)v[12];
    info->list_mean = num(p, "mean");
    info->list_imbalance = num(p, "imbalance");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(b, "seed");
    if (cJSON_IsString(seed)) snprintf(info->seed, sizeof info->seed, "%s", seed->valuestring);
    info->assign_recall = num(b, "assign_recall");
    info->build_seconds = num(b, "total_seconds");
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(b, "seconds"), *it;
    cJSON_ArrayForEach(it, ph)
    {
        /* members of an object only: an array's items have no name to print */
        if (info->n_phases == CHIMERA_MAX_PHASES || !cJSON_IsNumber(it) || !it->string) break;
        snprintf(info->phase[info->n_phases], sizeof info->phase[0], "%s", it->string);
        info->phase_seconds[info->n_phases++] = it->valuedouble;
    }
    /* the living index: segments, deletions, drift (update.h) */
    info->n_deleted = (int64_t)num(meta, "n_deleted");
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(meta, "segments");
    info->n_segments = cJSON_IsArray(segs) ? (uint32_t)cJSON_GetArraySize(segs) : 1;
    int si_ = 0;
    cJSON_ArrayForEach(it, segs)
    {
        if (si_++ == 0) continue; /* the base */
        info->appended_docs += (int64_t)num(it, "docs");
        info->appended_tokens += (int64_t)num(it, "tokens");
    }
    const cJSON *tomb = cJSON_GetObjectItemCaseSensitive(meta, "tombstones");
    info->n_deletion_lists = cJSON_IsArray(tomb) ? (uint32_t)cJSON_GetArraySize(tomb) : 0;
    info->assign_sim_p10 = num(b, "assign_sim_p10");
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(meta, "drift");
    info->drift_tokens = (int64_t)num(dr, "tokens");
    info->drift_below = info->drift_tokens ? num(dr, "below_p10") / (double)info->drift_tokens : 0;
    /* Advice: the added tokens fit the centroids clearly worse than the built ones did
     * (2.5x the build's 10% below its 10th percentile) and are a sizeable part of the
     * index (a fifth), so new documents' tokens crowd a few lists and residuals grow:
     * rebuilding retrains the centroids. */
    info->recluster_advised = info->drift_tokens > 0 && info->drift_below >= 0.25 &&
                              (double)info->drift_tokens >= 0.2 * (double)info->n_tokens;
    ix_defaults d;
    ix_defaults_read(meta, info->n_docs - info->n_deleted, &d, &info->calibration_stale);
    info->calibrate_target = d.n ? d.target : 0;
    info->n_calibrated = d.n;
    for (int i = 0; i < d.n; i++) {
        chimera_calibration *cal = &info->calibrated[i];
        cal->k = d.d[i].k;
        cal->n_probe = d.d[i].params.n_probe;
        cal->k_refine = d.d[i].params.k_refine;
        cal->k_fullbit = d.d[i].params.k_fullbit;
        cal->chunks = d.d[i].params.chunks;
        cal->k_interaction = d.d[i].params.k_interaction;
        cal->impute_scale = d.d[i].params.impute_scale;
        cal->recall = d.d[i].recall;
        cal->recall_low = d.d[i].recall_low;
        cal->reached = d.d[i].reached;
    }
    info->has_source = ix_source_state(meta, info->n_deleted);
    uint32_t n = ix_store_n_sections(st);
    for (uint32_t i = 0; i < n; i++) {
        const ix_store_section_desc *sd = ix_store_section_at(st, i);
        int dev = ix_section_on_device(sd->name);
        const ix_section_def *def = ix_section_find(sd->name);
        for (int t = CHIMERA_RERANK_F16; t <= CHIMERA_RERANK_F32; t++)
            if (def == &ix_sections[ix_vec_section(t)]) {
                info->rerank = (chimera_rerank)t;
                info->bytes_rerank += sd->bytes;
            }
        info->bytes_total += sd->bytes;
        if (dev) info->bytes_device += sd->bytes;
        else info->bytes_host += sd->bytes;
        if (info->n_sections < CHIMERA_INFO_MAX_SECTIONS) {
            chimera_section_info *si = &info->sections[info->n_sections++];
            snprintf(si->name, sizeof si->name, "%s", sd->name);
            snprintf(si->dtype, sizeof si->dtype, "%s", sd->dtype ? sd->dtype : "");
            si->bytes = sd->bytes;
            si->device_resident = dev;
        }
    }
    ix_store_close(st);
    return CHIMERA_OK;
}
