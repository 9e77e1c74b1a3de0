/* Opening an index: the store maps and checks the container (magic, version, headers,
 * sizes, optionally checksums); this file checks the content against the meta as
 * hostile input before anything uses it: every section present with exactly the size
 * its counts imply, offsets monotone and ending where they must, ids and centroid
 * numbers in range. ix_check goes further (O(N) memory) for `chimera check`.
 *
 * Values, not only structure. Checksums catch damage (a flipped bit, a torn write); they
 * cannot catch an index whose content is wrong but consistently checksummed (a writer
 * bug, an edit). What search would then get wrong is caught here, split by cost:
 *   open (always)  one pass over the small sections and the id arrays search indexes
 *                  with: user ids >= 0, the deletion bitmap (padding clear, count equal
 *                  to the meta's n_deleted), every centroid finite (K * dim floats, a
 *                  few bytes per token); and on 64 tokens spread over the index, codes
 *                  consistent with `bits`, factors finite and plausible, cluster-major
 *                  copies equal to the doc-major ones: a changed `bits` shows in every
 *                  token's code, and damage to a whole section in most of its rows, so
 *                  a sample catches them;
 *   ix_check       every code, every factor, ids unique: O(N) reads of the large
 *                  sections, as `chimera check` promises and open must not cost.
 * What the codes and factors allow follows from how rabitq.c makes them: a B-bit code
 * T_i = b_i 2^(B-1) + e_i is below 2^B and its top bit is the 1-bit plane (stored
 * again in d1_codes); kappa = |r|^2 / <u, r> >= 0 and f_error >= 0; and for the 1-bit
 * plane f_error / kappa = sqrt((d/4 - ip^2) / (d - 1)) with ip = |r|_1 / (2 |r|_2) >= 1/2,
 * so f_error <= kappa / 2. For B bits the same ratio is sqrt((|u|^2 - ip^2) / (d - 1))
 * with |u|^2 <= d (2^(B-1) - 1/2)^2. Bounds allow for the f16 rounding of the factors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "index/index.h"
#include "index/store.h"
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

/* Any size: a section whose length is its own (the serialised rotation). */
#define ANY_SIZE UINT64_MAX

/* Section `def` of sections.h: present unless optional (absent: *p = NULL), of the list's
 * element type when the manifest records one (the container allows untyped sections),
 * and exactly `want` bytes. *bytes: its size (0 when absent). */
static chimera_status section(const store *st, const ix_section_def *def, uint64_t want,
                              const void **p, uint64_t *bytes, chimera_error *err)
{
    *p = NULL;
    *bytes = 0;
    int64_t i = ix_store_find(st, def->name);
    if (i < 0) {
        if (!def->required) return CHIMERA_OK;
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: section '%s' is missing", def->name);
    }
    const ix_store_section_desc *sd = ix_store_section_at(st, (uint32_t)i);
    if (sd->dtype && strcmp(sd->dtype, def->dtype) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index: section '%s' holds %s elements, the format has %s", def->name,
                       sd->dtype, def->dtype);
    if (want != ANY_SIZE && sd->bytes != want)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index: section '%s' holds %llu bytes, the meta's counts need %llu",
                       def->name, (unsigned long long)sd->bytes, (unsigned long long)want);
    *p = sd->data;
    *bytes = sd->bytes;
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

/* ---- value checks shared by open and ix_check ----------------------------------------- */

static chimera_status check_centroids(const ix_index *ix, const char *who, chimera_error *err)
{
    uint64_t n = (uint64_t)ix->n_clusters * ix->dim;
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(ix->centroids[i]))
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section 'centroids': centroid %llu holds %g at dimension %llu",
                           who, (unsigned long long)(i / ix->dim), (double)ix->centroids[i],
                           (unsigned long long)(i % ix->dim));
    return CHIMERA_OK;
}

/* User ids are >= 0 (the corpus refuses others, and -1 pads results). */
static chimera_status check_doc_ids(const ix_index *ix, const char *who, chimera_error *err)
{
    for (int64_t d = 0; d < ix->n_docs; d++)
        if (ix->doc_ids[d] < 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section 'doc_ids': document %lld has id %lld (ids are >= 0)", who,
                           (long long)d, (long long)ix->doc_ids[d]);
    return CHIMERA_OK;
}

/* Counts the bitmap's marks into *n after checking that bits past n_docs are clear. */
static chimera_status count_deleted(const ix_index *ix, const char *who, int64_t *n,
                                    chimera_error *err)
{
    uint64_t nd = (uint64_t)ix->n_docs, nb = (nd + 7) / 8;
    if (nd % 8 && (ix->deleted[nb - 1] >> (nd % 8)) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section 'deleted': bits past the last document (%llu) are set",
                       who, (unsigned long long)(nd - 1));
    int64_t c = 0;
    for (uint64_t i = 0; i < nb; i++) c += __builtin_popcount(ix->deleted[i]);
    *n = c;
    return CHIMERA_OK;
}

/* The 1-bit plane of a B-bit code, 8 dims (one plane byte) at a time through tables:
 * for B <= 4 a code byte holds two dims (2 plane bits), for B > 4 one (1 bit). */
static void code_top_plane(const uint8_t *code, uint32_t dim_pad, uint32_t bits,
                           const uint8_t tab[256], uint8_t *plane)
{
    for (uint32_t j = 0; j < dim_pad / 8; j++) {
        unsigned v = 0;
        if (bits <= 4)
            for (int k = 0; k < 4; k++) v |= (unsigned)tab[code[4 * j + k]] << (2 * k);
        else
            for (int k = 0; k < 8; k++) v |= (unsigned)tab[code[8 * j + k]] << k;
        plane[j] = (uint8_t)v;
    }
}

/* Tokens 0, step, 2 step, ... < n_tokens: every value of dB_codes below 2^bits (the bits
 * above are zero) and its top bit equal to the token's plane in d1_codes. */
static chimera_status check_codes(const ix_index *ix, int64_t step, const char *who,
                                  chimera_error *err)
{
    uint32_t dp = ix->dim_pad, B = ix->bits, c1 = qm_code1_bytes(dp), cB = qm_codeB_bytes(dp, B);
    uint8_t tab[256], high = 0, plane[QUANT_DIM_MAX / 8];
    /* bits no value may set: above B in each nibble (B <= 4) or byte */
    if (B <= 4) high = (uint8_t)(((0xfu << B) & 0xfu) * 0x11u);
    else high = (uint8_t)(0xffu << B);
    for (unsigned b = 0; b < 256; b++)
        tab[b] = B <= 4 ? (uint8_t)(((b >> (B - 1)) & 1u) | (((b >> (B + 3)) & 1u) << 1))
                        : (uint8_t)((b >> (B - 1)) & 1u);
    for (int64_t t = 0; t < ix->n_tokens; t += step) {
        const uint8_t *code = ix->dB_codes + (size_t)t * cB;
        const uint8_t *ref = ix->d1_codes + (size_t)t * c1;
        uint8_t any = 0;
        for (uint32_t i = 0; i < cB; i++) any |= code[i] & high;
        code_top_plane(code, dp, B, tab, plane);
        if (!any && memcmp(plane, ref, c1) == 0) continue;
        for (uint32_t i = 0; i < dp; i++) {
            unsigned v = qm_codeB_get(code, B <= 4 ? 4 : 8, i);
            if (v >> B)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "%s: section 'dB_codes': token %lld holds %u at dimension %u, "
                               "more than the meta's bits = %u allows", who, (long long)t, v, i,
                               B);
            if (((v >> (B - 1)) & 1u) != qm_code1_bit(ref, i))
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "%s: sections 'dB_codes' and 'd1_codes' disagree: token %lld, "
                               "dimension %u: the top bit of its code for the meta's bits = %u "
                               "is not its 1-bit plane", who, (long long)t, i, B);
        }
    }
    return CHIMERA_OK;
}

static int f16_finite(uint16_t h) { return (h & 0x7c00u) != 0x7c00u; }
static int f16_negative(uint16_t h) { return (h & 0x8000u) && (h & 0x7fffu); }
/* For messages: qm_f16_to_f32 decodes finite halves only. */
static double f16_show(uint16_t h)
{
    if (f16_finite(h)) return qm_f16_to_f32(h);
    return (h & 0x3ffu) ? NAN : (h & 0x8000u) ? -INFINITY : INFINITY;
}

/* Relative slack for two f16 roundings (2^-11 each), and an absolute one for subnormals. */
#define FACT_REL (1.0f + 0x1p-9f)
#define FACT_ABS 0x1p-20f

/* Rows 0, step, 2 step, ... < n of a 1-bit factor section. */
static chimera_status check_f1(const quant_f1 *f, int64_t n, int64_t step, const char *sec,
                               const char *who, chimera_error *err)
{
    for (int64_t t = 0; t < n; t += step) {
        const quant_f1 *x = &f[t];
        const char *why = NULL;
        if (!f16_finite(x->kappa) || !f16_finite(x->alpha) || !f16_finite(x->f_error))
            why = "a non-finite factor";
        else if (f16_negative(x->kappa) || f16_negative(x->f_error))
            why = "a negative kappa or f_error";
        else if (qm_f16_to_f32(x->f_error) > 0.5f * qm_f16_to_f32(x->kappa) * FACT_REL + FACT_ABS)
            why = "f_error above kappa / 2, which no 1-bit code allows";
        if (why)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section '%s': %s at row %lld (kappa %g, alpha %g, f_error %g)",
                           who, sec, why, (long long)t, f16_show(x->kappa), f16_show(x->alpha),
                           f16_show(x->f_error));
    }
    return CHIMERA_OK;
}

/* Tokens 0, step, 2 step, ... of dB_fact. */
static chimera_status check_fB(const ix_index *ix, int64_t step, const char *who,
                               chimera_error *err)
{
    float d = (float)ix->dim_pad;
    float ratio = sqrtf(d / (d - 1.0f)) * ((float)(1u << (ix->bits - 1)) - 0.5f);
    for (int64_t t = 0; t < ix->n_tokens; t += step) {
        const quant_fB *x = &ix->dB_fact[t];
        const char *why = NULL;
        if (!isfinite(x->kappa) || !f16_finite(x->alpha) || !f16_finite(x->f_error))
            why = "a non-finite factor";
        else if (x->kappa < 0 || f16_negative(x->f_error))
            why = "a negative kappa or f_error";
        else if (qm_f16_to_f32(x->f_error) > x->kappa * ratio * FACT_REL + FACT_ABS)
            why = "f_error above what a code of this many bits allows";
        if (why)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section 'dB_fact': %s at token %lld (kappa %g, alpha %g, "
                           "f_error %g)", who, why, (long long)t, (double)x->kappa,
                           f16_show(x->alpha), f16_show(x->f_error));
    }
    return CHIMERA_OK;
}

/* Tokens (and posting positions) whose codes and factors open checks, spread evenly
 * over the sections: enough that a changed `bits` cannot hide (each token's code shows
 * it with probability ~1 - 2^-dim) and that damage to a whole section (a writer that
 * wrote garbage, a section swapped for another's) shows, few enough to cost nothing.
 * Damage to single values is ix_check's. */
#define OPEN_SAMPLE 64

/* Posting positions 0, step, ...: the cluster-major copy equals the doc-major one. */
static chimera_status check_copies(const ix_index *ix, int64_t step, const char *who,
                                   chimera_error *err)
{
    size_t c1 = qm_code1_bytes(ix->dim_pad);
    for (int64_t i = 0; i < ix->n_tokens; i += step) {
        uint32_t t = ix->post_tok[i];
        if (memcmp(ix->c1_codes + (size_t)i * c1, ix->d1_codes + (size_t)t * c1, c1) != 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: sections 'c1_codes' and 'd1_codes' disagree: posting %lld and "
                           "token %u have different codes", who, (long long)i, t);
        if (memcmp(&ix->c1_fact[i], &ix->d1_fact[t], sizeof ix->c1_fact[i]) != 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: sections 'c1_fact' and 'd1_fact' disagree: posting %lld and "
                           "token %u have different factors", who, (long long)i, t);
    }
    return CHIMERA_OK;
}

static chimera_status load(ix_index *ix, chimera_error *err)
{
    const cJSON *meta = ix_store_meta(ix->st);
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

    /* Every section of the list, with the size the meta's counts imply. */
    uint64_t c1 = qm_code1_bytes(ix->dim_pad), cB = qm_codeB_bytes(ix->dim_pad, ix->bits);
    const uint64_t need[IX_N_SECTIONS] = {
        [IX_SEC_rotation] = ANY_SIZE,
        [IX_SEC_centroids] = k * dim * 4,
        [IX_SEC_graph_adj] = k * deg * 4,
        [IX_SEC_graph_entry] = ne * 4,
        [IX_SEC_post_off] = (k + 1) * 8,
        [IX_SEC_post_tok] = nt * 4,
        [IX_SEC_post_doc] = nt * 4,
        [IX_SEC_c1_codes] = nt * c1,
        [IX_SEC_c1_fact] = nt * sizeof(quant_f1),
        [IX_SEC_d1_codes] = nt * c1,
        [IX_SEC_d1_fact] = nt * sizeof(quant_f1),
        [IX_SEC_tok_cid] = nt * 4,
        [IX_SEC_dB_codes] = nt * cB,
        [IX_SEC_dB_fact] = nt * sizeof(quant_fB),
        [IX_SEC_doc_off] = (nd + 1) * 8,
        [IX_SEC_doc_ids] = nd * 8,
        [IX_SEC_deleted] = (nd + 7) / 8,
    };
    const void *p[IX_N_SECTIONS];
    uint64_t bytes[IX_N_SECTIONS];
    for (int i = 0; i < IX_N_SECTIONS; i++)
        CM_TRY(section(ix->st, &ix_sections[i], need[i], &p[i], &bytes[i], err));
    CM_TRY(quant_rotation_deserialize(&ix->rot, p[IX_SEC_rotation], bytes[IX_SEC_rotation], err));
    if (ix->rot.dim != ix->dim)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: rotation is for dim %u, the index has %u",
                       ix->rot.dim, ix->dim);
    ix->centroids = p[IX_SEC_centroids];
    ix->g.adj = (uint32_t *)p[IX_SEC_graph_adj];
    ix->g.entry = (uint32_t *)p[IX_SEC_graph_entry];
    ix->g.n = ix->n_clusters;
    ix->g.degree = ix->degree;
    ix->g.n_entry = ix->n_entry;
    ix->post_off = p[IX_SEC_post_off];
    ix->post_tok = p[IX_SEC_post_tok];
    ix->post_doc = p[IX_SEC_post_doc];
    ix->c1_codes = p[IX_SEC_c1_codes];
    ix->c1_fact = p[IX_SEC_c1_fact];
    ix->d1_codes = p[IX_SEC_d1_codes];
    ix->d1_fact = p[IX_SEC_d1_fact];
    ix->tok_cid = p[IX_SEC_tok_cid];
    ix->dB_codes = p[IX_SEC_dB_codes];
    ix->dB_fact = p[IX_SEC_dB_fact];
    ix->doc_off = p[IX_SEC_doc_off];
    ix->doc_ids = p[IX_SEC_doc_ids];
    ix->deleted = p[IX_SEC_deleted];
    /* Cheap structural checks: everything search indexes with. */
    CM_TRY(check_offsets(ix->post_off, k, (int64_t)nt, "post_off", err));
    CM_TRY(check_offsets(ix->doc_off, nd, (int64_t)nt, "doc_off", err));
    CM_TRY(check_below(ix->post_tok, nt, nt, "post_tok", err));
    CM_TRY(check_below(ix->post_doc, nt, nd, "post_doc", err));
    CM_TRY(check_below(ix->tok_cid, nt, k, "tok_cid", err));
    CM_TRY(check_below(ix->g.adj, k * deg, k, "graph_adj", err));
    CM_TRY(check_below(ix->g.entry, ne, k, "graph_entry", err));
    /* Cheap value checks (see the top of this file). */
    CM_TRY(check_doc_ids(ix, "index", err));
    CM_TRY(count_deleted(ix, "index", &ix->n_deleted, err));
    if (cJSON_GetObjectItemCaseSensitive(meta, "n_deleted")) {
        uint64_t want;
        CM_TRY(meta_u64(meta, "n_deleted", nd, &want, err));
        if ((int64_t)want != ix->n_deleted)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "index: section 'deleted' marks %lld documents, the meta's "
                           "n_deleted says %llu", (long long)ix->n_deleted,
                           (unsigned long long)want);
    }
    CM_TRY(check_centroids(ix, "index", err));
    int64_t step = ix->n_tokens / OPEN_SAMPLE > 1 ? ix->n_tokens / OPEN_SAMPLE : 1;
    CM_TRY(check_codes(ix, step, "index", err));
    CM_TRY(check_f1(ix->d1_fact, ix->n_tokens, step, "d1_fact", "index", err));
    CM_TRY(check_f1(ix->c1_fact, ix->n_tokens, step, "c1_fact", "index", err));
    CM_TRY(check_fB(ix, step, "index", err));
    CM_TRY(check_copies(ix, step, "index", err));
    return CHIMERA_OK;
}

chimera_status ix_open(const char *dir, int verify, ix_index *ix, chimera_error *err)
{
    memset(ix, 0, sizeof *ix);
    CM_TRY(ix_store_open(dir, verify, &ix->st, err));
    chimera_status s = load(ix, err);
    if (s != CHIMERA_OK) {
        cm_fail_prefix(err, "%s", dir);
        ix_close(ix);
    }
    return s;
}

void ix_close(ix_index *ix)
{
    ix_store_close(ix->st);
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
    s = ix_store_verify(ix->st, err);
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
            if (memcmp(&ix->c1_fact[i], &ix->d1_fact[t], sizeof ix->c1_fact[i]) != 0) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                            "check: c1_fact and d1_fact of token %u differ", t);
                break;
            }
        }
    for (int64_t t = 0; t < N && s == CHIMERA_OK; t++)
        if (!seen[t]) s = cm_fail(err, CHIMERA_ERR_CORRUPT, "check: token %lld is in no posting list", (long long)t);
    /* values: what search computes with (see the top of this file) */
    if (s == CHIMERA_OK) s = check_centroids(ix, "check", err);
    if (s == CHIMERA_OK) s = check_codes(ix, 1, "check", err);
    if (s == CHIMERA_OK) s = check_f1(ix->d1_fact, N, 1, "d1_fact", "check", err);
    if (s == CHIMERA_OK) s = check_f1(ix->c1_fact, N, 1, "c1_fact", "check", err);
    if (s == CHIMERA_OK) s = check_fB(ix, 1, "check", err);
    if (s == CHIMERA_OK) s = check_doc_ids(ix, "check", err);
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
    /* Last, after everything that would make it corrupt: an index whose documents are
     * all deleted is consistent but answers every query with nothing. It is an error,
     * not a note, because check is the gate before an index is served and such an index
     * cannot serve; CHIMERA_ERR_EMPTY (not _CORRUPT) tells a caller that emptied it on
     * purpose from damage. */
    int64_t n_del = 0;
    if (s == CHIMERA_OK) s = count_deleted(ix, "check", &n_del, err);
    if (s == CHIMERA_OK && n_del == ix->n_docs)
        s = cm_fail(err, CHIMERA_ERR_EMPTY,
                    "check: section 'deleted': all %lld documents are deleted, so every search "
                    "returns nothing", (long long)ix->n_docs);
done:
    cm_free(seen);
    cm_free(ids);
    return s;
}
