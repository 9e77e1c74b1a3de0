/* `chimera info`: what an index holds, from its manifest alone (store_info maps
 * nothing), so it is instant on indexes of any size and works on damaged ones as far
 * as their manifest is readable. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "index/index.h"
#include "core/alloc.h"

/* Sections the GPU backend does not upload: the full-bit codes and their factors, read
 * only by the host's re-scoring, and the user ids, mapped on output. */
int ix_section_on_device(const char *name)
{
    return strcmp(name, "dB_codes") != 0 && strcmp(name, "dB_fact") != 0 &&
           strcmp(name, "doc_ids") != 0;
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(it) ? it->valuedouble : 0;
}

chimera_status ix_info(const char *dir, chimera_index_info *info, chimera_error *err)
{
    memset(info, 0, sizeof *info);
    store *st;
    CM_TRY(store_info(dir, &st, err));
    const cJSON *man = store_manifest(st), *meta = store_meta(st);
    store_format_version(st, &info->format_major, &info->format_minor);
    info->generation = store_generation(st);
    const cJSON *lv = cJSON_GetObjectItemCaseSensitive(man, "library_version");
    if (cJSON_IsString(lv))
        snprintf(info->library_version, sizeof info->library_version, "%s", lv->valuestring);
    info->dim = (uint32_t)num(meta, "dim");
    info->dim_pad = (uint32_t)num(meta, "dim_pad");
    info->bits = (uint32_t)num(meta, "bits");
    info->n_clusters = (uint32_t)num(meta, "n_clusters");
    info->graph_degree = (uint32_t)num(meta, "graph_degree");
    info->n_docs = (int64_t)num(meta, "n_docs");
    info->n_tokens = (int64_t)num(meta, "n_tokens");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(meta, "postings");
    info->list_min = (int64_t)num(p, "min");
    info->list_median = (int64_t)num(p, "median");
    info->list_max = (int64_t)num(p, "max");
    info->list_mean = num(p, "mean");
    info->list_imbalance = num(p, "imbalance");
    info->list_empty = (uint32_t)num(p, "empty");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(meta, "build");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(b, "seed");
    if (cJSON_IsString(seed)) snprintf(info->seed, sizeof info->seed, "%s", seed->valuestring);
    info->build_threads = (int)num(b, "threads");
    info->assign_recall = num(b, "assign_recall");
    info->build_seconds = num(b, "total_seconds");
    info->build_peak_rss = (uint64_t)num(b, "peak_rss_bytes");
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(b, "seconds"), *it;
    cJSON_ArrayForEach(it, ph)
    {
        if (info->n_phases == CHIMERA_MAX_PHASES || !cJSON_IsNumber(it)) break;
        snprintf(info->phase[info->n_phases], sizeof info->phase[0], "%s", it->string);
        info->phase_seconds[info->n_phases++] = it->valuedouble;
    }
    uint32_t n = store_n_sections(st);
    for (uint32_t i = 0; i < n; i++) {
        const store_section_desc *sd = store_section_at(st, i);
        int dev = ix_section_on_device(sd->name);
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
    store_close(st);
    return CHIMERA_OK;
}
