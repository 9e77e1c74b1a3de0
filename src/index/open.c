/* Opening an index: the store maps and checks the container (magic, version, headers,
 * sizes, optionally checksums); this file checks the content against the meta as
 * hostile input before anything uses it: every section present with exactly the size
 * its counts imply, offsets monotone and ending where they must, ids and centroid
 * numbers in range. ix_check goes further (O(N) memory) for `chimera check`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "index/index.h"
#include "core/alloc.h"

static chimera_status meta_u64(const cJSON *meta, const char *key, uint64_t max, uint64_t *v,
                               chimera_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(meta, key);
    if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > (double)max ||
        it->valuedouble != floor(it->valuedouble))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index meta: '%s' missing or out of range", key);
    *v = (uint64_t)it->valuedouble;
    return CHIMERA_OK;
}

static chimera_status section(const store *st, const char *name, uint64_t want, const void **p,
                              chimera_error *err)
{
    uint64_t bytes;
    if (store_section(st, name, p, &bytes) != CHIMERA_OK)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: section '%s' is missing", name);
    if (bytes != want)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index: section '%s' holds %llu bytes, the meta's counts need %llu", name,
                       (unsigned long long)bytes, (unsigned long long)want);
    return CHIMERA_OK;
}

static chimera_status check_offsets(const int64_t *off, uint64_t n, int64_t end, const char *name,
                                    chimera_error *err)
{
    if (off[0] != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: %s[0] = %lld, expected 0", name,
                       (long long)off[0]);
    for (uint64_t i = 0; i < n; i++)
        if (off[i + 1] < off[i])
            return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: %s decreases at entry %llu", name,
                           (unsigned long long)i);
    if (off[n] != end)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: %s ends at %lld, expected %lld", name,
                       (long long)off[n], (long long)end);
    return CHIMERA_OK;
}

static chimera_status check_below(const uint32_t *v, uint64_t n, uint64_t bound, const char *name,
                                  chimera_error *err)
{
    for (uint64_t i = 0; i < n; i++)
        if (v[i] >= bound)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "index: %s[%llu] = %u is out of range (< %llu expected)", name,
                           (unsigned long long)i, v[i], (unsigned long long)bound);
    return CHIMERA_OK;
}

static chimera_status load(ix_index *ix, chimera_error *err)
{
    const cJSON *meta = store_meta(ix->st);
    uint64_t dim, dim_pad, bits, nd, nt, k, deg, ne;
    CM_TRY(meta_u64(meta, "dim", 4096, &dim, err));
    CM_TRY(meta_u64(meta, "dim_pad", QUANT_DIM_MAX, &dim_pad, err));
    CM_TRY(meta_u64(meta, "bits", QUANT_BITS_MAX, &bits, err));
    CM_TRY(meta_u64(meta, "n_docs", UINT32_MAX, &nd, err));
    CM_TRY(meta_u64(meta, "n_tokens", UINT32_MAX, &nt, err));
    CM_TRY(meta_u64(meta, "n_clusters", UINT32_MAX, &k, err));
    CM_TRY(meta_u64(meta, "graph_degree", 1024, &deg, err));
    CM_TRY(meta_u64(meta, "graph_entries", UINT32_MAX, &ne, err));
    if (dim == 0 || dim_pad != quant_dim_pad((uint32_t)dim) || bits == 0 || k == 0 || k > nt ||
        nd == 0 || ne == 0 || ne > k || (deg >= k && k > 1))
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index meta: inconsistent dims/counts (dim %llu, dim_pad %llu, bits %llu, "
                       "%llu clusters, %llu tokens, degree %llu)",
                       (unsigned long long)dim, (unsigned long long)dim_pad,
                       (unsigned long long)bits, (unsigned long long)k, (unsigned long long)nt,
                       (unsigned long long)deg);
    ix->dim = (uint32_t)dim;
    ix->dim_pad = (uint32_t)dim_pad;
    ix->bits = (uint32_t)bits;
    ix->n_docs = (int64_t)nd;
    ix->n_tokens = (int64_t)nt;
    ix->n_clusters = (uint32_t)k;
    ix->degree = (uint32_t)deg;
    ix->n_entry = (uint32_t)ne;

    const void *p;
    uint64_t rbytes;
    if (store_section(ix->st, "rotation", &p, &rbytes) != CHIMERA_OK)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: section 'rotation' is missing");
    CM_TRY(quant_rotation_deserialize(&ix->rot, p, rbytes, err));
    if (ix->rot.dim != ix->dim)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: rotation is for dim %u, the index has %u",
                       ix->rot.dim, ix->dim);
    uint64_t c1 = qm_code1_bytes(ix->dim_pad), cB = qm_codeB_bytes(ix->dim_pad, ix->bits);
#define SEC(name, bytes, field)                                                                \
    do {                                                                                       \
        CM_TRY(section(ix->st, name, bytes, &p, err));                                         \
        ix->field = p;                                                                         \
    } while (0)
    SEC("centroids", k * dim * 4, centroids);
    CM_TRY(section(ix->st, "graph_adj", k * deg * 4, &p, err));
    ix->g.adj = (uint32_t *)p;
    CM_TRY(section(ix->st, "graph_entry", ne * 4, &p, err));
    ix->g.entry = (uint32_t *)p;
    ix->g.n = ix->n_clusters;
    ix->g.degree = ix->degree;
    ix->g.n_entry = ix->n_entry;
    SEC("post_off", (k + 1) * 8, post_off);
    SEC("post_tok", nt * 4, post_tok);
    SEC("post_doc", nt * 4, post_doc);
    SEC("c1_codes", nt * c1, c1_codes);
    SEC("c1_fact", nt * sizeof(quant_f1), c1_fact);
    SEC("d1_codes", nt * c1, d1_codes);
    SEC("d1_fact", nt * sizeof(quant_f1), d1_fact);
    SEC("tok_cid", nt * 4, tok_cid);
    SEC("dB_codes", nt * cB, dB_codes);
    SEC("dB_fact", nt * sizeof(quant_fB), dB_fact);
    SEC("doc_off", (nd + 1) * 8, doc_off);
    SEC("doc_ids", nd * 8, doc_ids);
    SEC("deleted", (nd + 7) / 8, deleted);
#undef SEC
    /* Cheap structural checks: everything search indexes with. */
    CM_TRY(check_offsets(ix->post_off, k, (int64_t)nt, "post_off", err));
    CM_TRY(check_offsets(ix->doc_off, nd, (int64_t)nt, "doc_off", err));
    CM_TRY(check_below(ix->post_tok, nt, nt, "post_tok", err));
    CM_TRY(check_below(ix->post_doc, nt, nd, "post_doc", err));
    CM_TRY(check_below(ix->tok_cid, nt, k, "tok_cid", err));
    CM_TRY(check_below(ix->g.adj, k * deg, k, "graph_adj", err));
    CM_TRY(check_below(ix->g.entry, ne, k, "graph_entry", err));
    return CHIMERA_OK;
}

chimera_status ix_open(const char *dir, int verify, ix_index *ix, chimera_error *err)
{
    memset(ix, 0, sizeof *ix);
    CM_TRY(store_open(dir, verify, &ix->st, err));
    chimera_status s = load(ix, err);
    if (s != CHIMERA_OK) {
        cm_fail_prefix(err, "%s", dir);
        ix_close(ix);
    }
    return s;
}

void ix_close(ix_index *ix)
{
    store_close(ix->st);
    memset(ix, 0, sizeof *ix);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

chimera_status ix_check(const ix_index *ix, chimera_error *err)
{
    int64_t N = ix->n_tokens;
    uint8_t *seen = cm_calloc((size_t)N, 1);
    int64_t *ids = cm_malloc((size_t)ix->n_docs * sizeof *ids);
    chimera_status s = CHIMERA_OK;
    if (!seen || !ids) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "check: out of memory");
        goto done;
    }
    /* Checksums first: damage to a section is then reported as that section's, not as
     * the inconsistency it causes further on. */
    s = store_verify(ix->st, err);
    if (s != CHIMERA_OK) goto done;
    /* every token in exactly one list, and the lists agree with tok_cid / post_doc */
    for (uint32_t c = 0; c < ix->n_clusters && s == CHIMERA_OK; c++)
        for (int64_t i = ix->post_off[c]; i < ix->post_off[c + 1]; i++) {
            uint32_t t = ix->post_tok[i];
            if (seen[t]++) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT, "check: token %u is in two posting lists", t);
                break;
            }
            if (ix->tok_cid[t] != c) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                            "check: token %u is in list %u but tok_cid says %u", t, c, ix->tok_cid[t]);
                break;
            }
            uint32_t d = ix->post_doc[i];
            if ((int64_t)t < ix->doc_off[d] || (int64_t)t >= ix->doc_off[d + 1]) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                            "check: posting %lld says token %u is in document %u, it is not",
                            (long long)i, t, d);
                break;
            }
            if (memcmp(ix->c1_codes + (size_t)i * qm_code1_bytes(ix->dim_pad),
                       ix->d1_codes + (size_t)t * qm_code1_bytes(ix->dim_pad),
                       qm_code1_bytes(ix->dim_pad)) != 0) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                            "check: cluster-major and doc-major codes of token %u differ", t);
                break;
            }
        }
    for (int64_t t = 0; t < N && s == CHIMERA_OK; t++)
        if (!seen[t]) s = cm_fail(err, CHIMERA_ERR_CORRUPT, "check: token %lld is in no posting list", (long long)t);
    if (s == CHIMERA_OK) {
        memcpy(ids, ix->doc_ids, (size_t)ix->n_docs * sizeof *ids);
        qsort(ids, (size_t)ix->n_docs, sizeof *ids, cmp_i64);
        for (int64_t i = 1; i < ix->n_docs; i++)
            if (ids[i] == ids[i - 1]) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT, "check: document id %lld appears twice",
                            (long long)ids[i]);
                break;
            }
    }
    if (s == CHIMERA_OK) {
        graph_check_stats gs;
        s = graph_check(&ix->g, &gs, err);
    }
done:
    cm_free(seen);
    cm_free(ids);
    return s;
}
