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
static chimera_status section(const store *st, const ix_section_def *def, const char *name,
                              uint64_t want, const void **p, uint64_t *bytes, chimera_error *err)
{
    *p = NULL;
    *bytes = 0;
    int64_t i = ix_store_find(st, name);
    if (i < 0) {
        if (!def->required) return CHIMERA_OK;
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index: section '%s' is missing", name);
    }
    const ix_store_section_desc *sd = ix_store_section_at(st, (uint32_t)i);
    if (sd->dtype && strcmp(sd->dtype, def->dtype) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index: section '%s' holds %s elements, the format has %s", name,
                       sd->dtype, def->dtype);
    if (want != ANY_SIZE && sd->bytes != want)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index: section '%s' holds %llu bytes, the meta's counts need %llu",
                       name, (unsigned long long)sd->bytes, (unsigned long long)want);
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

/* The name of section `base` of segment sg ("dB_codes", "s3_dB_codes"). */
static const char *seg_sec(char buf[FMT_NAME_BYTES], const ix_segment *sg, const char *base)
{
    if (sg->seq == 0) snprintf(buf, FMT_NAME_BYTES, "%s", base);
    else snprintf(buf, FMT_NAME_BYTES, "s%u_%s", sg->seq, base);
    return buf;
}

/* User ids are >= 0 (the corpus refuses others, and -1 pads results). */
static chimera_status check_doc_ids(const ix_segment *sg, const char *who, chimera_error *err)
{
    char nm[FMT_NAME_BYTES];
    for (int64_t d = 0; d < sg->n_docs; d++)
        if (sg->doc_ids[d] < 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section '%s': document %lld has id %lld (ids are >= 0)", who,
                           seg_sec(nm, sg, "doc_ids"), (long long)d, (long long)sg->doc_ids[d]);
    return CHIMERA_OK;
}

/* id_order is a permutation of the segment's documents that sorts its ids (ties by
 * document): what the binary search of ix_find_id relies on. */
static chimera_status check_id_order(const ix_segment *sg, const char *who, chimera_error *err)
{
    char nm[FMT_NAME_BYTES];
    uint8_t *seen = cm_calloc((size_t)sg->n_docs / 8 + 1, 1);
    if (!seen) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", who);
    chimera_status s = CHIMERA_OK;
    for (int64_t i = 0; i < sg->n_docs && s == CHIMERA_OK; i++) {
        uint32_t d = sg->id_order[i];
        if (d >= sg->n_docs || ((seen[d >> 3] >> (d & 7)) & 1))
            s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                        "%s: section '%s' is not a permutation of the segment's %lld documents "
                        "(entry %lld)", who, seg_sec(nm, sg, "id_order"), (long long)sg->n_docs,
                        (long long)i);
        else {
            seen[d >> 3] |= (uint8_t)(1u << (d & 7));
            if (i > 0) {
                uint32_t e = sg->id_order[i - 1];
                if (sg->doc_ids[e] > sg->doc_ids[d] || (sg->doc_ids[e] == sg->doc_ids[d] && e > d))
                    s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                                "%s: section '%s' does not sort the ids (entry %lld)", who,
                                seg_sec(nm, sg, "id_order"), (long long)i);
            }
        }
    }
    cm_free(seen);
    return s;
}

/* Counts the bitmap's marks into *n after checking that bits past n_docs are clear. */
static chimera_status count_bits(const uint8_t *bm, int64_t n_docs, const char *who, int64_t *n,
                                 chimera_error *err)
{
    uint64_t nd = (uint64_t)n_docs, nb = (nd + 7) / 8;
    if (nd % 8 && (bm[nb - 1] >> (nd % 8)) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section 'deleted': bits past the last document (%llu) are set",
                       who, (unsigned long long)(nd - 1));
    int64_t c = 0;
    for (uint64_t i = 0; i < nb; i++) c += __builtin_popcount(bm[i]);
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

/* Tokens 0, step, 2 step, ... of segment sg: every value of dB_codes below 2^bits (the
 * bits above are zero) and its top bit equal to the token's plane in d1_codes. */
static chimera_status check_codes(const ix_index *ix, const ix_segment *sg, int64_t step,
                                  const char *who, chimera_error *err)
{
    uint32_t dp = ix->dim_pad, B = ix->bits, c1 = qm_code1_bytes(dp), cB = qm_codeB_bytes(dp, B);
    uint8_t tab[256], high = 0, plane[QUANT_DIM_MAX / 8];
    char n1[FMT_NAME_BYTES], n2[FMT_NAME_BYTES];
    /* bits no value may set: above B in each nibble (B <= 4) or byte */
    if (B <= 4) high = (uint8_t)(((0xfu << B) & 0xfu) * 0x11u);
    else high = (uint8_t)(0xffu << B);
    for (unsigned b = 0; b < 256; b++)
        tab[b] = B <= 4 ? (uint8_t)(((b >> (B - 1)) & 1u) | (((b >> (B + 3)) & 1u) << 1))
                        : (uint8_t)((b >> (B - 1)) & 1u);
    for (int64_t t = 0; t < sg->n_tokens; t += step) {
        const uint8_t *code = sg->dB_codes + (size_t)t * cB;
        const uint8_t *ref = sg->d1_codes + (size_t)t * c1;
        uint8_t any = 0;
        for (uint32_t i = 0; i < cB; i++) any |= code[i] & high;
        code_top_plane(code, dp, B, tab, plane);
        if (!any && memcmp(plane, ref, c1) == 0) continue;
        for (uint32_t i = 0; i < dp; i++) {
            unsigned v = qm_codeB_get(code, B <= 4 ? 4 : 8, i);
            if (v >> B)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "%s: section '%s': token %lld holds %u at dimension %u, "
                               "more than the meta's bits = %u allows", who,
                               seg_sec(n1, sg, "dB_codes"), (long long)t, v, i, B);
            if (((v >> (B - 1)) & 1u) != qm_code1_bit(ref, i))
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "%s: sections '%s' and '%s' disagree: token %lld, "
                               "dimension %u: the top bit of its code for the meta's bits = %u "
                               "is not its 1-bit plane", who, seg_sec(n1, sg, "dB_codes"),
                               seg_sec(n2, sg, "d1_codes"), (long long)t, i, B);
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

/* Tokens 0, step, 2 step, ... of a segment's dB_fact. */
static chimera_status check_fB(const ix_index *ix, const ix_segment *sg, int64_t step,
                               const char *who, chimera_error *err)
{
    float d = (float)ix->dim_pad;
    float ratio = sqrtf(d / (d - 1.0f)) * ((float)(1u << (ix->bits - 1)) - 0.5f);
    char nm[FMT_NAME_BYTES];
    for (int64_t t = 0; t < sg->n_tokens; t += step) {
        const quant_fB *x = &sg->dB_fact[t];
        const char *why = NULL;
        if (!isfinite(x->kappa) || !f16_finite(x->alpha) || !f16_finite(x->f_error))
            why = "a non-finite factor";
        else if (x->kappa < 0 || f16_negative(x->f_error))
            why = "a negative kappa or f_error";
        else if (qm_f16_to_f32(x->f_error) > x->kappa * ratio * FACT_REL + FACT_ABS)
            why = "f_error above what a code of this many bits allows";
        if (why)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section '%s': %s at token %lld (kappa %g, alpha %g, "
                           "f_error %g)", who, seg_sec(nm, sg, "dB_fact"), why, (long long)t,
                           (double)x->kappa, f16_show(x->alpha), f16_show(x->f_error));
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
static chimera_status check_copies(const ix_index *ix, const ix_segment *sg, int64_t step,
                                   const char *who, chimera_error *err)
{
    size_t c1 = qm_code1_bytes(ix->dim_pad);
    char n1[FMT_NAME_BYTES], n2[FMT_NAME_BYTES];
    for (int64_t i = 0; i < sg->n_tokens; i += step) {
        uint32_t t = sg->post_tok[i];
        if (memcmp(sg->c1_codes + (size_t)i * c1, sg->d1_codes + (size_t)t * c1, c1) != 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: sections '%s' and '%s' disagree: posting %lld and "
                           "token %u have different codes", who, seg_sec(n1, sg, "c1_codes"),
                           seg_sec(n2, sg, "d1_codes"), (long long)i, t);
        if (memcmp(&sg->c1_fact[i], &sg->d1_fact[t], sizeof sg->c1_fact[i]) != 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: sections '%s' and '%s' disagree: posting %lld and "
                           "token %u have different factors", who, seg_sec(n1, sg, "c1_fact"),
                           seg_sec(n2, sg, "d1_fact"), (long long)i, t);
    }
    return CHIMERA_OK;
}

/* An integer member of a JSON object, in [0, max]. */
static chimera_status item_u64(const cJSON *obj, const char *key, uint64_t max, const char *what,
                               uint64_t *v, chimera_error *err)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > (double)max ||
        it->valuedouble != floor(it->valuedouble))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "index meta: %s: '%s' missing or out of range",
                       what, key);
    *v = (uint64_t)it->valuedouble;
    return CHIMERA_OK;
}

static int cmp_id_doc(const void *a, const void *b, const int64_t *ids)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (ids[x] != ids[y]) return ids[x] < ids[y] ? -1 : 1;
    return (x > y) - (x < y);
}

/* qsort has no context argument in C11: a merge sort of the permutation by (id, doc). */
static void sort_by_id(uint32_t *v, uint32_t *tmp, int64_t n, const int64_t *ids)
{
    if (n < 2) return;
    int64_t h = n / 2;
    sort_by_id(v, tmp, h, ids);
    sort_by_id(v + h, tmp, n - h, ids);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_id_doc(&v[j], &v[i], ids) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

chimera_status ix_id_order_compute(const int64_t *ids, int64_t n, uint32_t *order,
                                   chimera_error *err)
{
    uint32_t *tmp = cm_malloc((size_t)(n > 0 ? n : 1) * sizeof *tmp);
    if (!tmp) return cm_fail(err, CHIMERA_ERR_NOMEM, "index: out of memory sorting ids");
    for (int64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
    sort_by_id(order, tmp, n, ids);
    cm_free(tmp);
    return CHIMERA_OK;
}

int64_t ix_find_id(const ix_index *ix, int64_t id)
{
    for (uint32_t s = ix->n_segs; s-- > 0;) { /* newest first: a re-added id lives there */
        const ix_segment *sg = &ix->segs[s];
        int64_t lo = 0, hi = sg->n_docs;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (sg->doc_ids[sg->id_order[mid]] < id) lo = mid + 1;
            else hi = mid;
        }
        for (; lo < sg->n_docs && sg->doc_ids[sg->id_order[lo]] == id; lo++) {
            int64_t doc = sg->doc_base + sg->id_order[lo];
            if (!ix_is_deleted(ix, doc)) return doc;
        }
    }
    return -1;
}

/* The segments the meta lists ("segments": [{"seq", "docs", "tokens", "lists"}], the
 * base first with seq 0; absent: the base alone, with the meta's counts). */
static chimera_status load_segment_list(ix_index *ix, const cJSON *meta, chimera_error *err)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(meta, "segments");
    int n = arr ? cJSON_GetArraySize(arr) : 1;
    if (arr && (!cJSON_IsArray(arr) || n < 1 || n > IX_MAX_SEGMENTS))
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index meta: 'segments' must list 1..%d segments", IX_MAX_SEGMENTS);
    ix->segs = cm_calloc((size_t)n, sizeof *ix->segs);
    if (!ix->segs) return cm_fail(err, CHIMERA_ERR_NOMEM, "index: out of memory");
    ix->n_segs = (uint32_t)n;
    int64_t docs = 0, toks = 0;
    for (int i = 0; i < n; i++) {
        ix_segment *sg = &ix->segs[i];
        uint64_t seq = 0, nd = (uint64_t)ix->n_docs, nt = (uint64_t)ix->n_tokens,
                 nl = ix->n_clusters;
        if (arr) {
            const cJSON *o = cJSON_GetArrayItem(arr, i);
            char what[32];
            snprintf(what, sizeof what, "segment %d", i);
            if (!cJSON_IsObject(o))
                return cm_fail(err, CHIMERA_ERR_CORRUPT, "index meta: %s is not an object", what);
            CM_TRY(item_u64(o, "seq", 999999999, what, &seq, err));
            CM_TRY(item_u64(o, "docs", UINT32_MAX, what, &nd, err));
            CM_TRY(item_u64(o, "tokens", UINT32_MAX, what, &nt, err));
            if (cJSON_GetObjectItemCaseSensitive(o, "lists"))
                CM_TRY(item_u64(o, "lists", ix->n_clusters, what, &nl, err));
            if ((i == 0) != (seq == 0) || (i > 0 && seq <= ix->segs[i - 1].seq) || nd == 0 ||
                nt == 0 || nl == 0)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "index meta: %s: seq %llu, %llu documents, %llu tokens, %llu "
                               "lists (the base is seq 0, then increasing; none empty)", what,
                               (unsigned long long)seq, (unsigned long long)nd,
                               (unsigned long long)nt, (unsigned long long)nl);
        }
        sg->seq = (uint32_t)seq;
        sg->doc_base = docs;
        sg->tok_base = toks;
        sg->n_docs = (int64_t)nd;
        sg->n_tokens = (int64_t)nt;
        sg->n_lists = (uint32_t)nl;
        docs += (int64_t)nd;
        toks += (int64_t)nt;
    }
    if (docs != ix->n_docs || toks != ix->n_tokens)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index meta: the segments hold %lld documents and %lld tokens, the "
                       "meta's n_docs and n_tokens say %lld and %lld", (long long)docs,
                       (long long)toks, (long long)ix->n_docs, (long long)ix->n_tokens);
    return CHIMERA_OK;
}

/* A running identity over section checksums (splitmix64's finaliser as the mixer). */
static uint64_t key_mix(uint64_t key, const store *st, const char *name)
{
    int64_t i = ix_store_find(st, name);
    uint64_t x = key ^ (i >= 0 ? ix_store_section_at(st, (uint32_t)i)->xxh3 : 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Rows 0, step, 2 step, ... of a segment's stored vectors: every value finite (what the
 * exact re-rank adds up; a damaged block of a section shows in the sample, single values
 * in ix_check's pass over all). */
static chimera_status check_vectors(const ix_index *ix, const ix_segment *sg, int64_t step,
                                    const char *who, chimera_error *err)
{
    char nm[FMT_NAME_BYTES];
    float row[QUANT_DIM_MAX];
    const size_t es = ix_vec_elem_bytes(ix->vec_type);
    for (int64_t t = 0; t < sg->n_tokens; t += step) {
        ix_vec_decode(ix->vec_type, (const uint8_t *)sg->vectors + (size_t)t * ix->dim * es,
                      ix->dim, row);
        for (uint32_t i = 0; i < ix->dim; i++)
            if (!isfinite(row[i]))
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "%s: section '%s': token %lld holds %g at dimension %u", who,
                               seg_sec(nm, sg, ix_sections[ix_vec_section(ix->vec_type)].name),
                               (long long)t, (double)row[i], i);
    }
    return CHIMERA_OK;
}

/* The segment's stored vectors (the exact re-rank tier): at most one of the three
 * element types, and the base segment's in every segment. The base decides whether the
 * index has them; an appended segment without them (written by a library from before
 * the tier, which ignores what it does not know) leaves the index readable but the tier
 * incomplete, so only a re-rank is refused (vec_complete). */
static chimera_status segment_vectors(ix_index *ix, ix_segment *sg, const void *const *p,
                                      chimera_error *err)
{
    static const int types[3] = {CHIMERA_RERANK_F32, CHIMERA_RERANK_BF16, CHIMERA_RERANK_F16};
    char nm[FMT_NAME_BYTES], n2[FMT_NAME_BYTES];
    int type = CHIMERA_RERANK_NONE;
    for (int i = 0; i < 3; i++) {
        const void *v = p[ix_vec_section(types[i])];
        if (!v) continue;
        if (type != CHIMERA_RERANK_NONE)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "index: segment %u has both '%s' and '%s' (stored vectors come in "
                           "one element type)", sg->seq,
                           seg_sec(nm, sg, ix_sections[ix_vec_section(type)].name),
                           seg_sec(n2, sg, ix_sections[ix_vec_section(types[i])].name));
        type = types[i];
        sg->vectors = v;
    }
    if (sg->seq == 0) {
        ix->vec_type = type;
        ix->vec_complete = type != CHIMERA_RERANK_NONE;
        return CHIMERA_OK;
    }
    if (type != CHIMERA_RERANK_NONE && type != ix->vec_type)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index: segment %u stores its vectors as %s, the base segment %s", sg->seq,
                       chimera_rerank_name(type),
                       ix->vec_type ? chimera_rerank_name(ix->vec_type) : "stores none");
    if (type == CHIMERA_RERANK_NONE && ix->vec_complete) {
        ix->vec_complete = 0;
        ix->vec_missing_seq = sg->seq;
    }
    return CHIMERA_OK;
}

/* Maps and checks the per-segment sections of sg (sections.h: IX_SEGMENT). */
static chimera_status load_segment(ix_index *ix, ix_segment *sg, chimera_error *err)
{
    const uint64_t nd = (uint64_t)sg->n_docs, nt = (uint64_t)sg->n_tokens, nl = sg->n_lists;
    const uint64_t c1 = qm_code1_bytes(ix->dim_pad), cB = qm_codeB_bytes(ix->dim_pad, ix->bits);
    const uint64_t need[IX_N_SECTIONS] = {
        [IX_SEC_post_off] = (nl + 1) * 8,
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
        [IX_SEC_post_cid] = nl * 4,
        [IX_SEC_id_order] = nd * 4,
        [IX_SEC_vectors_f32] = nt * ix->dim * 4,
        [IX_SEC_vectors_bf16] = nt * ix->dim * 2,
        [IX_SEC_vectors_f16] = nt * ix->dim * 2,
    };
    const void *p[IX_N_SECTIONS] = {0};
    uint64_t bytes;
    char nm[FMT_NAME_BYTES];
    sg->key = sg->seq;
    for (int i = 0; i < IX_N_SECTIONS; i++)
        if (ix_sections[i].scope == IX_SEGMENT) {
            CM_TRY(section(ix->st, &ix_sections[i], seg_sec(nm, sg, ix_sections[i].name), need[i],
                           &p[i], &bytes, err));
            sg->key = key_mix(sg->key, ix->st, nm);
        }
    sg->post_off = p[IX_SEC_post_off];
    sg->post_tok = p[IX_SEC_post_tok];
    sg->post_doc = p[IX_SEC_post_doc];
    sg->c1_codes = p[IX_SEC_c1_codes];
    sg->c1_fact = p[IX_SEC_c1_fact];
    sg->d1_codes = p[IX_SEC_d1_codes];
    sg->d1_fact = p[IX_SEC_d1_fact];
    sg->tok_cid = p[IX_SEC_tok_cid];
    sg->dB_codes = p[IX_SEC_dB_codes];
    sg->dB_fact = p[IX_SEC_dB_fact];
    sg->doc_off = p[IX_SEC_doc_off];
    sg->doc_ids = p[IX_SEC_doc_ids];
    sg->post_cid = p[IX_SEC_post_cid];
    sg->id_order = p[IX_SEC_id_order];
    CM_TRY(segment_vectors(ix, sg, p, err));
    if (!sg->post_cid && nl != ix->n_clusters)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index: segment %u has %llu posting lists for %u clusters and no "
                       "section '%s'", sg->seq, (unsigned long long)nl, ix->n_clusters,
                       seg_sec(nm, sg, "post_cid"));
    /* Cheap structural checks: everything search indexes with. */
    CM_TRY(check_offsets(sg->post_off, nl, (int64_t)nt, seg_sec(nm, sg, "post_off"), err));
    CM_TRY(check_offsets(sg->doc_off, nd, (int64_t)nt, seg_sec(nm, sg, "doc_off"), err));
    CM_TRY(check_below(sg->post_tok, nt, nt, seg_sec(nm, sg, "post_tok"), err));
    CM_TRY(check_below(sg->post_doc, nt, nd, seg_sec(nm, sg, "post_doc"), err));
    CM_TRY(check_below(sg->tok_cid, nt, ix->n_clusters, seg_sec(nm, sg, "tok_cid"), err));
    if (sg->post_cid)
        for (uint64_t l = 0; l < nl; l++)
            if (sg->post_cid[l] >= ix->n_clusters || (l > 0 && sg->post_cid[l] <= sg->post_cid[l - 1]))
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "index: %s[%llu] = %u: clusters must increase and be < %u",
                               seg_sec(nm, sg, "post_cid"), (unsigned long long)l,
                               sg->post_cid[l], ix->n_clusters);
    CM_TRY(check_doc_ids(sg, "index", err));
    if (sg->id_order) CM_TRY(check_id_order(sg, "index", err));
    else {
        sg->id_order_own = cm_malloc((size_t)nd * sizeof(uint32_t));
        if (!sg->id_order_own) return cm_fail(err, CHIMERA_ERR_NOMEM, "index: out of memory");
        CM_TRY(ix_id_order_compute(sg->doc_ids, sg->n_docs, sg->id_order_own, err));
        sg->id_order = sg->id_order_own;
    }
    for (uint64_t d = 0; d < nd; d++) {
        int64_t len = sg->doc_off[d + 1] - sg->doc_off[d];
        if (len > ix->max_doc_len) ix->max_doc_len = len;
    }
    int64_t step = sg->n_tokens / OPEN_SAMPLE > 1 ? sg->n_tokens / OPEN_SAMPLE : 1;
    char n2[FMT_NAME_BYTES];
    CM_TRY(check_codes(ix, sg, step, "index", err));
    CM_TRY(check_f1(sg->d1_fact, sg->n_tokens, step, seg_sec(nm, sg, "d1_fact"), "index", err));
    CM_TRY(check_f1(sg->c1_fact, sg->n_tokens, step, seg_sec(n2, sg, "c1_fact"), "index", err));
    CM_TRY(check_fB(ix, sg, step, "index", err));
    CM_TRY(check_copies(ix, sg, step, "index", err));
    if (sg->vectors) CM_TRY(check_vectors(ix, sg, step, "index", err));
    return CHIMERA_OK;
}

/* The deletion bitmap over all documents: the base segment's section, plus the marks of
 * every tombstone list ("tombstones": [{"seq", "count"}], section "t<seq>_del": the
 * global documents deleted by one commit, increasing). With only the base and no lists,
 * the mapped section itself. */
static chimera_status load_deleted(ix_index *ix, const cJSON *meta, chimera_error *err)
{
    const ix_segment *base = &ix->segs[0];
    const void *p;
    uint64_t bytes;
    CM_TRY(section(ix->st, &ix_sections[IX_SEC_deleted], "deleted", (uint64_t)(base->n_docs + 7) / 8,
                   &p, &bytes, err));
    int64_t n_base = 0;
    CM_TRY(count_bits(p, base->n_docs, "index", &n_base, err));
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(meta, "tombstones");
    int nt = arr ? cJSON_GetArraySize(arr) : 0;
    if (arr && (!cJSON_IsArray(arr) || nt > IX_MAX_SEGMENTS))
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "index meta: 'tombstones' must be an array of at most %d lists",
                       IX_MAX_SEGMENTS);
    ix->n_tombstone_lists = (uint32_t)nt;
    if (ix->n_segs == 1 && nt == 0) {
        ix->deleted = p;
        ix->n_deleted = n_base;
        return CHIMERA_OK;
    }
    size_t nb = (size_t)(ix->n_docs + 7) / 8;
    ix->deleted_own = cm_calloc(nb, 1);
    if (!ix->deleted_own) return cm_fail(err, CHIMERA_ERR_NOMEM, "index: out of memory");
    memcpy(ix->deleted_own, p, (size_t)bytes);
    ix->deleted = ix->deleted_own;
    int64_t count = n_base;
    static const ix_section_def del_def = {"del", "u32", "[n]", "", 1, 1, IX_SHARED};
    uint64_t prev_seq = 0;
    for (int i = 0; i < nt; i++) {
        const cJSON *o = cJSON_GetArrayItem(arr, i);
        uint64_t seq, n;
        if (!cJSON_IsObject(o))
            return cm_fail(err, CHIMERA_ERR_CORRUPT, "index meta: tombstone list %d is not an object", i);
        CM_TRY(item_u64(o, "seq", 999999999, "tombstones", &seq, err));
        CM_TRY(item_u64(o, "count", UINT32_MAX, "tombstones", &n, err));
        if (seq <= prev_seq || n == 0)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "index meta: tombstone list %d: seq %llu, %llu entries (seq increases "
                           "from 1; no empty list)", i, (unsigned long long)seq,
                           (unsigned long long)n);
        prev_seq = seq;
        char nm[FMT_NAME_BYTES + 16];
        snprintf(nm, sizeof nm, "t%u_del", (unsigned)seq); /* seq < 10^9: fits the name */
        const uint32_t *v;
        CM_TRY(section(ix->st, &del_def, nm, n * 4, (const void **)&v, &bytes, err));
        for (uint64_t j = 0; j < n; j++) {
            if (v[j] >= ix->n_docs || (j > 0 && v[j] <= v[j - 1]))
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "index: section '%s': entry %llu = %u (documents increase and are "
                               "< %lld)", nm, (unsigned long long)j, v[j], (long long)ix->n_docs);
            if (!((ix->deleted_own[v[j] >> 3] >> (v[j] & 7)) & 1)) count++;
            ix->deleted_own[v[j] >> 3] |= (uint8_t)(1u << (v[j] & 7));
        }
    }
    ix->n_deleted = count;
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

    /* The shared sections, with the size the meta's counts imply. */
    const uint64_t need[IX_N_SECTIONS] = {
        [IX_SEC_rotation] = ANY_SIZE,
        [IX_SEC_centroids] = k * dim * 4,
        [IX_SEC_graph_adj] = k * deg * 4,
        [IX_SEC_graph_entry] = ne * 4,
    };
    const void *p[IX_N_SECTIONS] = {0};
    uint64_t bytes[IX_N_SECTIONS] = {0};
    for (int i = 0; i < IX_N_SECTIONS; i++)
        if (ix_sections[i].scope == IX_SHARED) {
            CM_TRY(section(ix->st, &ix_sections[i], ix_sections[i].name, need[i], &p[i], &bytes[i],
                           err));
            ix->shared_key = key_mix(ix->shared_key, ix->st, ix_sections[i].name);
        }
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
    CM_TRY(check_below(ix->g.adj, k * deg, k, "graph_adj", err));
    CM_TRY(check_below(ix->g.entry, ne, k, "graph_entry", err));
    CM_TRY(check_centroids(ix, "index", err));
    CM_TRY(load_segment_list(ix, meta, err));
    for (uint32_t i = 0; i < ix->n_segs; i++) CM_TRY(load_segment(ix, &ix->segs[i], err));
    CM_TRY(load_deleted(ix, meta, err));
    if (cJSON_GetObjectItemCaseSensitive(meta, "n_deleted")) {
        uint64_t want;
        CM_TRY(meta_u64(meta, "n_deleted", nd, &want, err));
        if ((int64_t)want != ix->n_deleted)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "index: section 'deleted' and the tombstone lists mark %lld "
                           "documents, the meta's n_deleted says %llu", (long long)ix->n_deleted,
                           (unsigned long long)want);
    }
    return CHIMERA_OK;
}

chimera_status ix_open_store(store *st, ix_index *ix, chimera_error *err)
{
    memset(ix, 0, sizeof *ix);
    ix->st = st;
    chimera_status s = load(ix, err);
    if (s != CHIMERA_OK) ix_close(ix);
    return s;
}

chimera_status ix_open(const char *dir, int verify, ix_index *ix, chimera_error *err)
{
    memset(ix, 0, sizeof *ix);
    store *st;
    CM_TRY(ix_store_open(dir, verify, &st, err));
    chimera_status s = ix_open_store(st, ix, err);
    if (s != CHIMERA_OK) cm_fail_prefix(err, "%s", dir);
    return s;
}

void ix_close(ix_index *ix)
{
    if (ix->segs)
        for (uint32_t i = 0; i < ix->n_segs; i++) cm_free(ix->segs[i].id_order_own);
    cm_free(ix->segs);
    cm_free(ix->deleted_own);
    ix_store_close(ix->st);
    memset(ix, 0, sizeof *ix);
}

/* Deep checks of one segment: every token in exactly one of its lists, lists consistent
 * with tok_cid and the documents, both copies of the 1-bit codes equal, every value. */
static chimera_status check_segment(const ix_index *ix, const ix_segment *sg, uint8_t *seen,
                                    chimera_error *err)
{
    size_t c1 = qm_code1_bytes(ix->dim_pad);
    memset(seen, 0, (size_t)sg->n_tokens);
    for (uint32_t l = 0; l < sg->n_lists; l++) {
        uint32_t c = sg->post_cid ? sg->post_cid[l] : l;
        for (int64_t i = sg->post_off[l]; i < sg->post_off[l + 1]; i++) {
            uint32_t t = sg->post_tok[i];
            if (seen[t]++)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "check: segment %u: token %u is in two posting lists", sg->seq, t);
            if (sg->tok_cid[t] != c)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "check: segment %u: token %u is in list %u but tok_cid says %u",
                               sg->seq, t, c, sg->tok_cid[t]);
            uint32_t d = sg->post_doc[i];
            if ((int64_t)t < sg->doc_off[d] || (int64_t)t >= sg->doc_off[d + 1])
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "check: segment %u: posting %lld says token %u is in document "
                               "%u, it is not", sg->seq, (long long)i, t, d);
            if (memcmp(sg->c1_codes + (size_t)i * c1, sg->d1_codes + (size_t)t * c1, c1) != 0)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "check: segment %u: cluster-major and doc-major codes of token "
                               "%u differ", sg->seq, t);
            if (memcmp(&sg->c1_fact[i], &sg->d1_fact[t], sizeof sg->c1_fact[i]) != 0)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "check: segment %u: c1_fact and d1_fact of token %u differ",
                               sg->seq, t);
        }
    }
    for (int64_t t = 0; t < sg->n_tokens; t++)
        if (!seen[t])
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "check: segment %u: token %lld is in no posting list", sg->seq,
                           (long long)t);
    char n1[FMT_NAME_BYTES], n2[FMT_NAME_BYTES];
    CM_TRY(check_codes(ix, sg, 1, "check", err));
    CM_TRY(check_f1(sg->d1_fact, sg->n_tokens, 1, seg_sec(n1, sg, "d1_fact"), "check", err));
    CM_TRY(check_f1(sg->c1_fact, sg->n_tokens, 1, seg_sec(n2, sg, "c1_fact"), "check", err));
    CM_TRY(check_fB(ix, sg, 1, "check", err));
    if (sg->vectors) CM_TRY(check_vectors(ix, sg, 1, "check", err));
    return check_doc_ids(sg, "check", err);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

chimera_status ix_check(const ix_index *ix, chimera_error *err)
{
    int64_t max_tok = 0;
    for (uint32_t i = 0; i < ix->n_segs; i++)
        if (ix->segs[i].n_tokens > max_tok) max_tok = ix->segs[i].n_tokens;
    uint8_t *seen = cm_calloc((size_t)max_tok, 1);
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
    if ((s = check_centroids(ix, "check", err)) != CHIMERA_OK) goto done;
    for (uint32_t i = 0; i < ix->n_segs && s == CHIMERA_OK; i++)
        s = check_segment(ix, &ix->segs[i], seen, err);
    /* user ids: unique among the documents not deleted (a deleted document's id may be
     * given to a new one) */
    int64_t n_live = 0;
    for (int64_t d = 0; d < ix->n_docs && s == CHIMERA_OK; d++)
        if (!ix_is_deleted(ix, d)) ids[n_live++] = ix_doc_id(ix, d);
    if (s == CHIMERA_OK) {
        qsort(ids, (size_t)n_live, sizeof *ids, cmp_i64);
        for (int64_t i = 1; i < n_live; i++)
            if (ids[i] == ids[i - 1]) {
                s = cm_fail(err, CHIMERA_ERR_CORRUPT,
                            "check: document id %lld appears twice among the documents not "
                            "deleted", (long long)ids[i]);
                break;
            }
    }
    for (uint32_t i = 0; i < ix->n_segs && s == CHIMERA_OK; i++)
        s = check_id_order(&ix->segs[i], "check", err);
    if (s == CHIMERA_OK) {
        graph_check_stats gs;
        s = graph_check(&ix->g, &gs, err);
    }
    /* Last, after everything that would make it corrupt: an index whose documents are
     * all deleted is consistent but answers every query with nothing. It is an error,
     * not a note, because check is the gate before an index is served and such an index
     * cannot serve; CHIMERA_ERR_EMPTY (not _CORRUPT) tells a caller that emptied it on
     * purpose from damage. */
    if (s == CHIMERA_OK && ix->n_deleted == ix->n_docs)
        s = cm_fail(err, CHIMERA_ERR_EMPTY,
                    "check: all %lld documents are deleted, so every search returns nothing",
                    (long long)ix->n_docs);
done:
    cm_free(seen);
    cm_free(ids);
    return s;
}
