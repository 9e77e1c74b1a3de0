/* The index build is checked against what it must produce, not against itself. A build
 * of a synthetic corpus, reopened, has the corpus's document offsets and the caller's
 * ids, and the counts, dims and bits asked for; ix_check passes; every token is in
 * exactly one posting list and the lists agree with post_doc and tok_cid (counted here
 * independently of ix_check); tok_cid is the true nearest centroid (brute force over
 * the stored centroids) for at least 99% of tokens; the 1-bit planes (both copies) are
 * the most significant bit plane of the B-bit codes for B = 2, 4, 8; the same input and
 * seed give byte-identical sections whatever the thread count, and another seed does
 * not; a float16 corpus gives exactly the sections of the float32 corpus holding the
 * same (rounded) values. Damage is caught: a byte flipped in a section's payload fails
 * a verified open with CHIMERA_ERR_CORRUPT naming the section (and ix_check on an
 * unverified open); a truncated section fails any open; an index rewritten through the
 * store with valid checksums but content that disagrees with its meta (counts,
 * offsets, ids out of range) fails to open naming the section; posting lists tampered in
 * memory fail ix_check. Bad input is refused without side effects: a parent that cannot
 * be written (CHIMERA_ERR_IO), more clusters than tokens, too many bits or a graph
 * degree over GRAPH_DEGREE_MAX (CHIMERA_ERR_INVALID_ARG, before any progress is
 * reported), a non-empty directory that is not an index; meta counts that no integer
 * holds (1e300, -5, 3.7) fail ix_info and ix_open naming the member; and a build
 * that fails at any one of its allocations leaves the previous index at its path
 * intact (it opens, checks and holds the old content) and no temporary directory, and so
 * does a build cancelled through its cancel callback at any of its phases. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/error.h"
#include "core/f16.h"
#include "core/npy.h"
#include "data/corpus.h"
#include "data/synth.h"
#include "index/index.h"
#include "index/store.h"
#include "quant/rabitq.h"
#include "tmpdir.h"
#include "core/alloc.h"

/* All sections the build writes: the list in index/sections.h. */
#define N_SECTIONS ((size_t)IX_N_SECTIONS)
/* A build writes every section of the list but post_cid (its lists are dense) and,
 * without --rerank, the three vectors_* (tests/test_rerank.c builds with them). */
#define N_BUILT (N_SECTIONS - 4)
static int built(size_t i)
{
    return i != IX_SEC_post_cid && i != IX_SEC_vectors_f32 && i != IX_SEC_vectors_bf16 &&
           i != IX_SEC_vectors_f16;
}

/* ---- fixtures ---------------------------------------------------------------------- */

typedef struct fixture {
    data_synth_corpus s;
    int64_t *ids;
    data_corpus c;
} fixture;

/* A synthetic corpus with user ids 1000 + 7 i (so ids differ from rows). */
static void fixture_make(fixture *f, int64_t n_docs, uint32_t dim, uint32_t min_len,
                         uint32_t max_len, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    chimera_synth_opts o = {.n_docs = n_docs, .dim = dim, .n_queries = 1, .seed = seed,
                            .min_len = min_len, .max_len = max_len};
    chimera_error err;
    if (data_synth_generate(&o, &f->s, &err) != CHIMERA_OK) {
        fprintf(stderr, "data_synth_generate: %s\n", err.msg);
        exit(2);
    }
    f->ids = cm_malloc((size_t)n_docs * sizeof *f->ids);
    for (int64_t i = 0; i < n_docs; i++) f->ids[i] = 1000 + 7 * i;
    if (data_corpus_wrap(&f->c, f->s.tokens, f->s.n_tokens, f->s.dim, f->s.doclens, f->s.n_docs,
                         f->ids, NULL, &err) != CHIMERA_OK) {
        fprintf(stderr, "data_corpus_wrap: %s\n", err.msg);
        exit(2);
    }
}

static void fixture_free(fixture *f)
{
    data_corpus_free(&f->c);
    cm_free(f->ids);
    data_synth_free(&f->s);
}

static chimera_status build(const data_corpus *c, const char *dir, uint32_t bits, uint32_t k,
                            uint64_t seed, int threads, chimera_error *err)
{
    ix_build_opts o = {.bits = bits, .n_clusters = k, .seed = seed, .n_threads = threads,
                       .no_sync = 1};
    return ix_build(c, dir, &o, NULL, err);
}

static const char *path_in(char *buf, size_t cap, const char *name)
{
    return test_path(buf, cap, name);
}

static void rm_rf(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

/* Number of entries of the test directory whose name contains `needle`. */
static int count_named(const char *needle)
{
    int n = 0;
    DIR *d = opendir(test_tmpdir());
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strstr(e->d_name, needle)) n++;
    if (d) closedir(d);
    return n;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static unsigned char *read_all(const char *path, long *n)
{
    *n = file_size(path);
    FILE *f = fopen(path, "rb");
    if (!f || *n < 0) {
        perror(path);
        exit(2);
    }
    unsigned char *b = cm_malloc((size_t)*n + 1);
    if (fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        perror(path);
        exit(2);
    }
    fclose(f);
    return b;
}

/* 1 when every section of the two indexes has the same bytes. `diff` receives the name
 * of the first that differs. */
static int same_sections(const char *a, const char *b, const char **diff)
{
    ix_index x, y;
    chimera_error err;
    *diff = "(open failed)";
    if (ix_open(a, 0, &x, &err) != CHIMERA_OK) return 0;
    if (ix_open(b, 0, &y, &err) != CHIMERA_OK) {
        ix_close(&x);
        return 0;
    }
    int same = 1;
    for (size_t i = 0; i < N_SECTIONS && same; i++) {
        if (!built(i)) continue;
        const void *p, *q;
        uint64_t np, nq;
        if (ix_store_section(x.st, ix_sections[i].name, &p, &np) != CHIMERA_OK ||
            ix_store_section(y.st, ix_sections[i].name, &q, &nq) != CHIMERA_OK || np != nq ||
            memcmp(p, q, np) != 0) {
            same = 0;
            *diff = ix_sections[i].name;
        }
    }
    ix_close(&x);
    ix_close(&y);
    return same;
}

/* ---- round trip -------------------------------------------------------------------- */

/* Structural facts checked independently of ix_check. */
static void check_structure(const ix_index *ix, const data_corpus *c, const char *what)
{
    int64_t N = ix->n_tokens;
    uint32_t *count = cm_calloc((size_t)N, sizeof *count);
    uint32_t *doc_of = cm_malloc((size_t)N * sizeof *doc_of);
    for (int64_t d = 0; d < c->n_docs; d++)
        for (int64_t t = c->doc_off[d]; t < c->doc_off[d + 1]; t++) doc_of[t] = (uint32_t)d;
    int64_t bad_doc = 0, bad_cid = 0, positions = 0;
    for (uint32_t k = 0; k < ix->n_clusters; k++)
        for (int64_t i = ix->segs[0].post_off[k]; i < ix->segs[0].post_off[k + 1]; i++) {
            uint32_t t = ix->segs[0].post_tok[i];
            positions++;
            if (t >= N) continue;
            count[t]++;
            bad_doc += ix->segs[0].post_doc[i] != doc_of[t];
            bad_cid += ix->segs[0].tok_cid[t] != k;
        }
    int64_t not_once = 0;
    for (int64_t t = 0; t < N; t++) not_once += count[t] != 1;
    CHECKF(positions == N, "%s: %lld posting positions for %lld tokens", what,
           (long long)positions, (long long)N);
    CHECKF(not_once == 0, "%s: %lld tokens not in exactly one posting list", what,
           (long long)not_once);
    CHECKF(bad_doc == 0 && bad_cid == 0, "%s: %lld wrong post_doc, %lld wrong tok_cid", what,
           (long long)bad_doc, (long long)bad_cid);
    cm_free(count);
    cm_free(doc_of);
}

/* Fraction of tokens whose tok_cid is the nearest stored centroid (by inner product,
 * in double; a tie within 1e-6 counts as a match). */
static double nearest_fraction(const ix_index *ix, const data_corpus *c)
{
    uint32_t d = ix->dim;
    float *scratch = cm_malloc((size_t)d * sizeof(float));
    int64_t good = 0;
    for (int64_t t = 0; t < ix->n_tokens; t++) {
        const float *v = data_corpus_rows(c, t, 1, scratch);
        double best = -INFINITY, mine = 0;
        for (uint32_t k = 0; k < ix->n_clusters; k++) {
            const float *ck = ix->centroids + (size_t)k * d;
            double ip = 0;
            for (uint32_t j = 0; j < d; j++) ip += (double)v[j] * ck[j];
            if (ip > best) best = ip;
            if (k == ix->segs[0].tok_cid[t]) mine = ip;
        }
        good += mine >= best - 1e-6;
    }
    cm_free(scratch);
    return (double)good / (double)ix->n_tokens;
}

static void test_roundtrip(void)
{
    fixture f;
    fixture_make(&f, 300, 96, 8, 40, 11);
    char dir[512];
    path_in(dir, sizeof dir, "rt");
    chimera_error err;
    const uint32_t K = 48;
    CHECK_OK(build(&f.c, dir, 4, K, 7, 2, &err), &err);
    ix_index ix;
    CHECK_OK(ix_open(dir, 1, &ix, &err), &err);
    if (!ix.st) {
        fixture_free(&f);
        return;
    }
    CHECK(ix.n_docs == f.c.n_docs && ix.n_tokens == f.c.n_tokens);
    CHECK(ix.dim == 96 && ix.dim_pad == quant_dim_pad(96) && ix.dim_pad % 64 == 0);
    CHECK(ix.bits == 4 && ix.n_clusters == K && ix.degree == 32);
    CHECK(memcmp(ix.segs[0].doc_off, f.c.doc_off, (size_t)(f.c.n_docs + 1) * sizeof(int64_t)) == 0);
    CHECK(memcmp(ix.segs[0].doc_ids, f.ids, (size_t)f.c.n_docs * sizeof(int64_t)) == 0);
    int64_t n_del = 0;
    for (int64_t d = 0; d < ix.n_docs; d++) n_del += ix_is_deleted(&ix, d);
    CHECK(n_del == 0);
    CHECK_OK(ix_check(&ix, &err), &err);
    check_structure(&ix, &f.c, "round trip");
    double nf = nearest_fraction(&ix, &f.c);
    printf("round trip: %lld docs, %lld tokens, K=%u, tok_cid nearest for %.4f of tokens\n",
           (long long)ix.n_docs, (long long)ix.n_tokens, K, nf);
    CHECKF(nf >= 0.99, "tok_cid is the nearest centroid for only %.4f of tokens", nf);
    /* centroids are unit vectors (index.h) */
    int bad_norm = 0;
    for (uint32_t k = 0; k < K; k++) {
        double n2 = 0;
        for (uint32_t j = 0; j < ix.dim; j++) n2 += (double)ix.centroids[k * ix.dim + j] * ix.centroids[k * ix.dim + j];
        bad_norm += fabs(n2 - 1.0) > 1e-3;
    }
    CHECK(bad_norm == 0);
    /* the manifest-only summary agrees */
    chimera_index_info info;
    CHECK_OK(ix_info(dir, &info, &err), &err);
    CHECK(info.n_docs == ix.n_docs && info.n_tokens == ix.n_tokens && info.dim == 96 &&
          info.bits == 4 && info.n_clusters == K && info.n_sections == N_BUILT);
    /* in the list's order, with its element types and residency */
    for (size_t i = 0, j = 0; i < N_SECTIONS && j < info.n_sections; i++) {
        if (!built(i)) continue;
        const ix_section_def *sd = &ix_sections[i];
        const chimera_section_info *si = &info.sections[j++];
        CHECKF(!strcmp(si->name, sd->name), "info lists %s where the list has %s", si->name,
               sd->name);
        CHECKF(!strcmp(si->dtype, sd->dtype), "section %s: dtype %s, the list has %s", sd->name,
               si->dtype, sd->dtype);
        CHECKF(si->device_resident == sd->on_device, "section %s: device_resident %d", sd->name,
               si->device_resident);
    }
    ix_close(&ix);
    /* every name of the list is found as itself, a segment's copy as its kind, and the
     * names of stored metadata changes as host-only sections of their own */
    for (int i = 0; i < IX_N_SECTIONS; i++) {
        char seg[64];
        snprintf(seg, sizeof seg, "s12_%s", ix_sections[i].name);
        CHECKF(ix_section_find(ix_sections[i].name) == &ix_sections[i], "ix_section_find(%s)",
               ix_sections[i].name);
        CHECKF(ix_section_find(seg) == (ix_sections[i].scope == IX_SEGMENT ? &ix_sections[i] : NULL),
               "ix_section_find(%s)", seg);
    }
    const char *changes[] = {"d7_ids", "m3_meta", "s4_meta"}, *others[] = {"d7_meta", "d_ids", "m3_ids", "t2_ids"};
    for (int i = 0; i < 3; i++)
        CHECKF(ix_section_is_metadata_change(changes[i]) && !ix_section_find(changes[i])->on_device,
               "%s is not a host-only metadata change", changes[i]);
    for (int i = 0; i < 4; i++)
        CHECKF(!ix_section_is_metadata_change(others[i]), "%s taken for a metadata change", others[i]);

    /* determinism: same input and seed, another thread count -> identical sections */
    char dir2[512], dir3[512];
    path_in(dir2, sizeof dir2, "rt2");
    path_in(dir3, sizeof dir3, "rt3");
    CHECK_OK(build(&f.c, dir2, 4, K, 7, 1, &err), &err);
    const char *diff;
    CHECKF(same_sections(dir, dir2, &diff), "a second build differs in section %s", diff);
    /* ...and a different seed is seen by the comparison */
    CHECK_OK(build(&f.c, dir3, 4, K, 8, 2, &err), &err);
    CHECK(!same_sections(dir, dir3, &diff));
    rm_rf(dir);
    rm_rf(dir2);
    rm_rf(dir3);
    fixture_free(&f);
}

/* c1_codes (cluster-major) and d1_codes (doc-major) are the MSB plane of dB_codes. */
static void test_msb_planes(void)
{
    fixture f;
    fixture_make(&f, 60, 96, 8, 40, 12);
    const uint32_t bits[] = {2, 4, 8};
    for (int bi = 0; bi < 3; bi++) {
        char dir[512];
        path_in(dir, sizeof dir, "msb");
        chimera_error err;
        CHECK_OK(build(&f.c, dir, bits[bi], 16, 3, 2, &err), &err);
        ix_index ix;
        CHECK_OK(ix_open(dir, 1, &ix, &err), &err);
        if (!ix.st) continue;
        CHECK(ix.bits == bits[bi]);
        CHECK_OK(ix_check(&ix, &err), &err);
        size_t c1 = qm_code1_bytes(ix.dim_pad), cB = qm_codeB_bytes(ix.dim_pad, ix.bits);
        uint8_t *msb = cm_malloc((size_t)ix.n_tokens * c1);
        quant_codeB_msb(ix.dim_pad, ix.bits, (size_t)ix.n_tokens, ix.segs[0].dB_codes, msb);
        CHECKF(memcmp(msb, ix.segs[0].d1_codes, (size_t)ix.n_tokens * c1) == 0,
               "B=%u: d1_codes are not the MSB plane of dB_codes", bits[bi]);
        int64_t bad = 0;
        for (int64_t i = 0; i < ix.n_tokens; i++)
            bad += memcmp(ix.segs[0].c1_codes + (size_t)i * c1, msb + (size_t)ix.segs[0].post_tok[i] * c1, c1) != 0;
        CHECKF(bad == 0, "B=%u: %lld cluster-major 1-bit codes differ from the MSB plane",
               bits[bi], (long long)bad);
        /* the codes are not degenerate: B-bit codes use more than the MSB */
        int64_t low_bits = 0;
        for (size_t i = 0; i < (size_t)ix.n_tokens * cB; i++) low_bits += ix.segs[0].dB_codes[i] != 0;
        CHECK(low_bits > 0);
        cm_free(msb);
        ix_close(&ix);
        rm_rf(dir);
    }
    fixture_free(&f);
}

/* A float16 token file builds the same index as the float32 values it holds. */
static void test_float16(void)
{
    fixture f;
    fixture_make(&f, 150, 64, 8, 40, 13);
    int64_t N = f.s.n_tokens;
    uint32_t d = f.s.dim;
    uint16_t *h = cm_malloc((size_t)N * d * sizeof *h);
    float *r = cm_malloc((size_t)N * d * sizeof *r);
    for (size_t i = 0; i < (size_t)N * d; i++) {
        h[i] = cm_f32_to_f16(f.s.tokens[i]);
        r[i] = cm_f16_to_f32(h[i]);
    }
    char tok[512], len[512], d16[512], d32[512];
    path_in(tok, sizeof tok, "tok16.npy");
    path_in(len, sizeof len, "lens.npy");
    path_in(d16, sizeof d16, "f16");
    path_in(d32, sizeof d32, "f32");
    chimera_error err;
    int64_t shape[2] = {N, d}, nd = f.s.n_docs;
    CHECK_OK(cm_npy_write(tok, CM_F16, 2, shape, h, &err), &err);
    CHECK_OK(cm_npy_write(len, CM_I64, 1, &nd, f.s.doclens, &err), &err);
    data_corpus c16, c32;
    CHECK_OK(data_corpus_open(&c16, tok, len, NULL, NULL, &err), &err);
    CHECK(c16.dtype == CM_F16);
    CHECK_OK(data_corpus_wrap(&c32, r, N, d, f.s.doclens, nd, NULL, NULL, &err), &err);
    CHECK_OK(build(&c16, d16, 4, 24, 5, 2, &err), &err);
    CHECK_OK(build(&c32, d32, 4, 24, 5, 2, &err), &err);
    ix_index ix;
    CHECK_OK(ix_open(d16, 1, &ix, &err), &err);
    if (ix.st) {
        CHECK(ix.n_tokens == N && ix.dim == d);
        CHECK_OK(ix_check(&ix, &err), &err);
        check_structure(&ix, &c16, "float16");
        ix_close(&ix);
    }
    const char *diff;
    CHECKF(same_sections(d16, d32, &diff), "float16 and float32 builds differ in %s", diff);
    data_corpus_free(&c16);
    data_corpus_free(&c32);
    cm_free(h);
    cm_free(r);
    rm_rf(d16);
    rm_rf(d32);
    fixture_free(&f);
}

/* ---- corruption -------------------------------------------------------------------- */

static void flip_byte(const char *path, long off)
{
    FILE *fp = fopen(path, "r+b");
    if (!fp || fseek(fp, off, SEEK_SET) != 0) {
        perror(path);
        exit(2);
    }
    int ch = fgetc(fp);
    fseek(fp, off, SEEK_SET);
    fputc(ch ^ 0x20, fp);
    fclose(fp);
}

static void test_flips_and_truncation(const char *dir)
{
    /* payload flips: the verified open fails naming the section; the plain open may
     * succeed (checksums unread), and then ix_check (which verifies them) fails */
    const char *victims[] = {"c1_codes", "post_off", "doc_off", "dB_fact", "tok_cid", "centroids"};
    for (size_t v = 0; v < sizeof victims / sizeof victims[0]; v++) {
        char file[600];
        snprintf(file, sizeof file, "%s/%s.bin", dir, victims[v]);
        long n;
        unsigned char *orig = read_all(file, &n);
        CHECK(n > 64);
        long off = 64 + (n - 64) / 2;
        if (!strcmp(victims[v], "post_off") || !strcmp(victims[v], "doc_off"))
            off = 64 + 8 * 3 + 1; /* a low byte of entry 3: stays a plausible offset */
        flip_byte(file, off);
        ix_index ix;
        chimera_error err = {0};
        chimera_status s = ix_open(dir, 1, &ix, &err);
        CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, victims[v]) && ix.st == NULL,
               "flip in %s: verified open gave %s: %s", victims[v], chimera_status_str(s), err.msg);
        s = ix_open(dir, 0, &ix, &err);
        if (s == CHIMERA_OK) {
            s = ix_check(&ix, &err);
            CHECKF(s == CHIMERA_ERR_CORRUPT, "flip in %s: ix_check gave %s", victims[v],
                   chimera_status_str(s));
            ix_close(&ix);
        } else {
            CHECKF(s == CHIMERA_ERR_CORRUPT, "flip in %s: open gave %s: %s", victims[v],
                   chimera_status_str(s), err.msg);
        }
        test_write_file(file, orig, (size_t)n);
        cm_free(orig);
    }
    /* truncation: any open fails, naming the section */
    const char *cut[] = {"post_tok", "dB_codes", "deleted"};
    for (size_t v = 0; v < sizeof cut / sizeof cut[0]; v++) {
        char file[600];
        snprintf(file, sizeof file, "%s/%s.bin", dir, cut[v]);
        long n;
        unsigned char *orig = read_all(file, &n);
        test_write_file(file, orig, (size_t)n - 1);
        ix_index ix;
        chimera_error err = {0};
        chimera_status s = ix_open(dir, 0, &ix, &err);
        CHECKF(s != CHIMERA_OK && strstr(err.msg, cut[v]), "truncated %s: open gave %s: %s",
               cut[v], chimera_status_str(s), err.msg);
        test_write_file(file, orig, (size_t)n);
        cm_free(orig);
    }
    /* restored: opens, verifies and checks again */
    ix_index ix;
    chimera_error err;
    CHECK_OK(ix_open(dir, 1, &ix, &err), &err);
    if (ix.st) {
        CHECK_OK(ix_check(&ix, &err), &err);
        ix_close(&ix);
    }
}

/* Rewrites the index at src into dst through the store API (so every checksum is
 * valid), with meta key `key` set to `value` (key NULL: unchanged) and, when `section`
 * is given, that section's payload passed through `edit` first. */
typedef void (*edit_fn)(void *data, uint64_t bytes);

static chimera_status rewrite(const char *src, const char *dst, const char *key, double value,
                              const char *section, edit_fn edit, chimera_error *err)
{
    store *st;
    CM_TRY(ix_store_open(src, 1, &st, err));
    ix_store_write_opts wo = {.no_sync = 1};
    ix_store_writer *w;
    chimera_status s = ix_store_writer_begin(dst, &wo, &w, err);
    if (s != CHIMERA_OK) {
        ix_store_close(st);
        return s;
    }
    for (uint32_t i = 0; i < ix_store_n_sections(st) && s == CHIMERA_OK; i++) {
        const ix_store_section_desc *sd = ix_store_section_at(st, i);
        ix_store_type t = {sd->dtype, sd->ndim, {0}};
        memcpy(t.shape, sd->shape, sizeof t.shape);
        const void *data = sd->data;
        void *copy = NULL;
        if (section && !strcmp(section, sd->name)) {
            copy = cm_malloc(sd->bytes + 1);
            memcpy(copy, sd->data, sd->bytes);
            edit(copy, sd->bytes);
            data = copy;
        }
        s = ix_store_writer_add_typed(w, sd->name, sd->dtype ? &t : NULL, data, sd->bytes, err);
        cm_free(copy);
    }
    cJSON *meta = cJSON_Duplicate(ix_store_meta(st), 1);
    if (key) cJSON_SetNumberValue(cJSON_GetObjectItem(meta, key), value);
    if (s == CHIMERA_OK)
        s = ix_store_writer_commit(w, meta, err);
    else
        ix_store_writer_abort(w);
    cJSON_Delete(meta);
    ix_store_close(st);
    return s;
}

static void edit_none(void *p, uint64_t n) { (void)p, (void)n; }
static void edit_post_off_swap(void *p, uint64_t n)
{
    /* make the offsets non-monotone: entry 2 above entry 3 */
    int64_t *o = p;
    (void)n;
    int64_t t = o[2];
    o[2] = o[3] + 1;
    o[3] = t;
}
static void edit_post_tok_range(void *p, uint64_t n) { ((uint32_t *)p)[n / 8] = 0xfffffff0u; }
static void edit_doc_off_end(void *p, uint64_t n) { ((int64_t *)p)[n / 8 - 1] -= 1; }
static void edit_post_tok_dup(void *p, uint64_t n)
{
    uint32_t *t = p;
    t[n / 4 - 1] = t[0]; /* a token twice, another in no list; all in range */
}

static void test_meta_disagrees(const char *dir)
{
    char bad[512];
    path_in(bad, sizeof bad, "rewritten");
    chimera_error err;
    ix_index ix;
    /* the faithful rewrite opens and checks: the rewriting itself is sound */
    CHECK_OK(rewrite(dir, bad, NULL, 0, "deleted", edit_none, &err), &err);
    CHECK_OK(ix_open(bad, 1, &ix, &err), &err);
    if (ix.st) {
        CHECK_OK(ix_check(&ix, &err), &err);
        ix_close(&ix);
    }
    store *st;
    CHECK_OK(ix_store_open(dir, 0, &st, &err), &err);
    const cJSON *m = ix_store_meta(st);
    double nd = cJSON_GetObjectItem(m, "n_docs")->valuedouble;
    double nt = cJSON_GetObjectItem(m, "n_tokens")->valuedouble;
    double k = cJSON_GetObjectItem(m, "n_clusters")->valuedouble;
    ix_store_close(st);
    struct {
        const char *key;
        double value;
        const char *section;
        edit_fn edit;
        const char *needle;
    } cases[] = {
        {"n_docs", nd + 1, NULL, NULL, "doc_off"},
        {"n_tokens", nt - 1, NULL, NULL, "post_tok"},
        {"n_clusters", k - 1, NULL, NULL, "clusters"},
        {"dim", 128, NULL, NULL, "dim"},
        {NULL, 0, "post_off", edit_post_off_swap, "post_off"},
        {NULL, 0, "post_tok", edit_post_tok_range, "post_tok"},
        {NULL, 0, "doc_off", edit_doc_off_end, "doc_off"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_OK(rewrite(dir, bad, cases[i].key, cases[i].value, cases[i].section,
                         cases[i].edit, &err), &err);
        memset(&err, 0, sizeof err);
        chimera_status s = ix_open(bad, 1, &ix, &err);
        CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, cases[i].needle),
               "case %zu (%s%s): open gave %s: %s", i, cases[i].key ? cases[i].key : "",
               cases[i].section ? cases[i].section : "", chimera_status_str(s), err.msg);
        if (s == CHIMERA_OK) ix_close(&ix);
    }
    /* Counts no integer can hold, negative or fractional: open and info (which casts
     * what it reads for `chimera info`) refuse them naming the member, before any cast
     * (converting 1e300 to an integer is undefined behaviour). */
    struct {
        const char *key;
        double value;
    } numbers[] = {{"dim", 1e300},          {"n_docs", -5},  {"n_tokens", 3.7},
                   {"graph_degree", 4294967296.0}, {"n_clusters", -1e300}, {"bits", 0.5}};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        CHECK_OK(rewrite(dir, bad, numbers[i].key, numbers[i].value, NULL, NULL, &err), &err);
        chimera_index_info *info = cm_malloc(sizeof *info);
        char want[64];
        snprintf(want, sizeof want, "meta.%s", numbers[i].key);
        memset(&err, 0, sizeof err);
        chimera_status s = ix_info(bad, info, &err);
        CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, want), "info with %s = %g: %s: %s",
               numbers[i].key, numbers[i].value, chimera_status_str(s), err.msg);
        cm_free(info);
        snprintf(want, sizeof want, "'%s'", numbers[i].key);
        memset(&err, 0, sizeof err);
        s = ix_open(bad, 0, &ix, &err);
        CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, want), "open with %s = %g: %s: %s",
               numbers[i].key, numbers[i].value, chimera_status_str(s), err.msg);
        if (s == CHIMERA_OK) ix_close(&ix);
    }
    /* a duplicated posting entry is in range (open accepts it), ix_check does not */
    CHECK_OK(rewrite(dir, bad, NULL, 0, "post_tok", edit_post_tok_dup, &err), &err);
    CHECK_OK(ix_open(bad, 1, &ix, &err), &err);
    if (ix.st) {
        chimera_status s = ix_check(&ix, &err);
        CHECKF(s == CHIMERA_ERR_CORRUPT, "duplicate posting: ix_check gave %s", chimera_status_str(s));
        ix_close(&ix);
    }
    rm_rf(bad);
}

/* ix_check on views whose posting data was altered in writable copies. */
static void test_check_in_memory(const char *dir)
{
    ix_index ix;
    chimera_error err;
    CHECK_OK(ix_open(dir, 0, &ix, &err), &err);
    if (!ix.st) return;
    int64_t N = ix.n_tokens;
    uint32_t *tok = cm_malloc((size_t)N * sizeof *tok);
    uint32_t *doc = cm_malloc((size_t)N * sizeof *doc);
    uint32_t *cid = cm_malloc((size_t)N * sizeof *cid);
    int64_t *ids = cm_malloc((size_t)ix.n_docs * sizeof *ids);
    size_t c1 = qm_code1_bytes(ix.dim_pad);
    uint8_t *codes = cm_malloc((size_t)N * c1);
    /* two positions in different lists */
    int64_t a = ix.segs[0].post_off[0], b = ix.segs[0].post_off[ix.n_clusters - 1];
    CHECK(ix.segs[0].post_off[1] > a && ix.segs[0].post_off[ix.n_clusters] > b);
    for (int kind = 0; kind < 6; kind++) {
        memcpy(tok, ix.segs[0].post_tok, (size_t)N * sizeof *tok);
        memcpy(doc, ix.segs[0].post_doc, (size_t)N * sizeof *doc);
        memcpy(cid, ix.segs[0].tok_cid, (size_t)N * sizeof *cid);
        memcpy(ids, ix.segs[0].doc_ids, (size_t)ix.n_docs * sizeof *ids);
        memcpy(codes, ix.segs[0].c1_codes, (size_t)N * c1);
        ix_index v = ix;
        ix_segment seg = ix.segs[0];
        v.segs = &seg;
        seg.post_tok = tok;
        seg.post_doc = doc;
        seg.tok_cid = cid;
        seg.doc_ids = ids;
        seg.c1_codes = codes;
        const char *what = "", *needle = "";
        switch (kind) {
        case 0: what = "untouched copy"; break;
        case 1: /* swap two tokens between lists (post_doc swapped too) */
            what = "tokens swapped between lists";
            needle = "tok_cid";
            tok[a] = ix.segs[0].post_tok[b], tok[b] = ix.segs[0].post_tok[a];
            doc[a] = ix.segs[0].post_doc[b], doc[b] = ix.segs[0].post_doc[a];
            break;
        case 2:
            what = "a token in two lists";
            needle = "two posting lists";
            tok[b] = tok[a], doc[b] = doc[a];
            break;
        case 3:
            what = "wrong post_doc";
            needle = "document";
            doc[a] = (doc[a] + 1) % (uint32_t)ix.n_docs;
            break;
        case 4:
            what = "duplicate user id";
            needle = "twice";
            ids[1] = ids[0];
            break;
        case 5:
            what = "cluster-major code differs";
            needle = "differ";
            codes[(size_t)b * c1] ^= 1;
            break;
        }
        memset(&err, 0, sizeof err);
        chimera_status s = ix_check(&v, &err);
        if (kind == 0) CHECK_OK(s, &err);
        else
            CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, needle), "%s: ix_check gave %s: %s",
                   what, chimera_status_str(s), err.msg);
    }
    cm_free(tok);
    cm_free(doc);
    cm_free(cid);
    cm_free(ids);
    cm_free(codes);
    ix_close(&ix);
}

static void test_corruption(void)
{
    fixture f;
    fixture_make(&f, 200, 64, 8, 40, 14);
    char dir[512];
    path_in(dir, sizeof dir, "corrupt");
    chimera_error err;
    CHECK_OK(build(&f.c, dir, 4, 64, 9, 2, &err), &err);
    test_flips_and_truncation(dir);
    test_meta_disagrees(dir);
    test_check_in_memory(dir);
    rm_rf(dir);
    fixture_free(&f);
}

/* ---- bad input and failed builds --------------------------------------------------- */

static void count_progress(void *user, const char *phase, double fraction)
{
    (void)phase, (void)fraction;
    ++*(int *)user;
}

static void test_bad_input(void)
{
    fixture f;
    fixture_make(&f, 100, 64, 8, 40, 15);
    chimera_error err;
    /* unwritable / missing parent */
    chimera_status s = build(&f.c, "/proc/chimera-test-x/idx", 4, 8, 1, 1, &err);
    CHECKF(s == CHIMERA_ERR_IO, "/proc/x/idx: %s: %s", chimera_status_str(s), err.msg);
    s = build(&f.c, "/proc/chimera-test-idx", 4, 8, 1, 1, &err);
    CHECKF(s == CHIMERA_ERR_IO, "/proc/idx: %s: %s", chimera_status_str(s), err.msg);
    char dir[512], missing[512];
    path_in(missing, sizeof missing, "no/such/idx");
    s = build(&f.c, missing, 4, 8, 1, 1, &err);
    CHECKF(s == CHIMERA_ERR_IO && strstr(err.msg, "no/such"), "missing parent: %s: %s",
           chimera_status_str(s), err.msg);
    path_in(dir, sizeof dir, "bad");
    /* more clusters than tokens, too many bits */
    s = build(&f.c, dir, 4, (uint32_t)f.c.n_tokens + 1, 1, 1, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG, "K > N: %s", chimera_status_str(s));
    s = build(&f.c, dir, QUANT_BITS_MAX + 1, 8, 1, 1, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG, "bits: %s", chimera_status_str(s));
    /* a graph degree the graph build cannot take is refused before any work (it used to
     * fail only after k-means): no progress reported, nothing written */
    int calls = 0;
    ix_build_opts go = {.graph_degree = GRAPH_DEGREE_MAX + 1, .n_clusters = 8, .no_sync = 1,
                        .progress = count_progress, .progress_user = &calls};
    memset(&err, 0, sizeof err);
    s = ix_build(&f.c, dir, &go, NULL, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG && strstr(err.msg, "graph-degree 128") && calls == 0,
           "degree 128: %s: %s (%d progress calls)", chimera_status_str(s), err.msg, calls);
    go.graph_degree = GRAPH_DEGREE_MAX; /* the largest allowed builds */
    s = ix_build(&f.c, dir, &go, NULL, &err);
    CHECK_OK(s, &err);
    rm_rf(dir);
    /* no temporary or side directory is left; the lock file beside the index stays */
    CHECK(file_size(dir) < 0 && count_named("bad.tmp") == 0 && count_named("bad.old") == 0);
    /* K == N is the largest allowed: builds and checks */
    fixture tiny;
    fixture_make(&tiny, 3, 64, 8, 9, 16);
    s = build(&tiny.c, dir, 4, (uint32_t)tiny.c.n_tokens, 1, 1, &err);
    CHECK_OK(s, &err);
    ix_index ix;
    if (s == CHIMERA_OK && ix_open(dir, 1, &ix, &err) == CHIMERA_OK) {
        CHECK_OK(ix_check(&ix, &err), &err);
        CHECK(ix.n_clusters == (uint32_t)tiny.c.n_tokens);
        ix_close(&ix);
    }
    rm_rf(dir);
    fixture_free(&tiny);
    /* a non-empty directory that is not an index is refused and left alone */
    char notidx[512], keep[600];
    path_in(notidx, sizeof notidx, "notidx");
    mkdir(notidx, 0755);
    snprintf(keep, sizeof keep, "%s/precious.txt", notidx);
    test_write_file(keep, "precious\n", 9);
    s = build(&f.c, notidx, 4, 8, 1, 1, &err);
    CHECKF(s == CHIMERA_ERR_INVALID_ARG, "non-index dir: %s: %s", chimera_status_str(s), err.msg);
    long n;
    unsigned char *b = read_all(keep, &n);
    CHECK(n == 9 && memcmp(b, "precious\n", 9) == 0);
    cm_free(b);
    char manifest[600];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", notidx);
    CHECK(file_size(manifest) < 0 && count_named("notidx.") == 0);
    rm_rf(notidx);
    fixture_free(&f);
}

/* A build that fails (at allocation n, for every n until it succeeds) into a path holding an
 * index leaves that index intact and nothing else behind; the unhindered build then
 * replaces it. */
static void test_failed_build_keeps_old(void)
{
    fixture f;
    fixture_make(&f, 120, 64, 8, 40, 17);
    char dir[512], ref[512];
    path_in(dir, sizeof dir, "keep");
    path_in(ref, sizeof ref, "keepref");
    chimera_error err;
    CHECK_OK(build(&f.c, dir, 4, 16, 1, 1, &err), &err);
    CHECK_OK(build(&f.c, ref, 4, 16, 1, 1, &err), &err);
    int n_failed = 0, done = 0, non_nomem = 0;
    for (int64_t n = 0; n < 5000 && !done; n++) { /* every allocation of the build */
        cm_alloc_fail_after(n);
        chimera_status s = build(&f.c, dir, 4, 16, 2 /* another seed */, 1, &err);
        cm_alloc_fail_after(-1);
        if (s == CHIMERA_OK) {
            done = 1;
            break;
        }
        n_failed++;
        if (s != CHIMERA_ERR_NOMEM) {
            non_nomem++;
            fprintf(stderr, "allocation %lld failed: %s: %s\n", (long long)n,
                    chimera_status_str(s), err.msg);
        }
        const char *diff;
        CHECKF(same_sections(dir, ref, &diff), "after failing allocation %lld the old index "
               "differs in %s", (long long)n, diff);
        ix_index ix;
        if (ix_open(dir, 1, &ix, &err) == CHIMERA_OK) {
            CHECK_OK(ix_check(&ix, &err), &err);
            ix_close(&ix);
        } else {
            CHECKF(0, "after failing allocation %lld the old index does not open: %s",
                   (long long)n, err.msg);
        }
        CHECKF(count_named(".tmp-") == 0, "a temporary directory remains after failing "
               "allocation %lld", (long long)n);
    }
    printf("failed builds: %d injected allocation failures, then success\n", n_failed);
    CHECK(done && n_failed >= 10);
    CHECK(non_nomem == 0);
    const char *diff;
    CHECK(!same_sections(dir, ref, &diff)); /* the new build (seed 2) is in place */
    ix_index ix;
    CHECK_OK(ix_open(dir, 1, &ix, &err), &err);
    if (ix.st) {
        CHECK_OK(ix_check(&ix, &err), &err);
        ix_close(&ix);
    }
    CHECK(count_named(".tmp-") == 0 && count_named(".old-") == 0);
    rm_rf(dir);
    rm_rf(ref);
    fixture_free(&f);
}

/* ---- cancellation ------------------------------------------------------------------ */

/* Cancels when progress first reaches `phase` (a prefix) past `after` (< 0: at the very
 * first poll, before any progress); counts the polls and notes any progress after. */
typedef struct cancel_at {
    const char *phase;
    double after;
    int stop;             /* set by the progress callback, read by the cancel callback */
    int polls_after_stop; /* cancel calls once it has returned non-zero: must stay 0 */
    int progress_after;   /* progress reports of a later phase after the stop */
    int reports_after;    /* progress reports of any phase after the stop */
    char last[32];
} cancel_at;

static void cancel_progress(void *user, const char *phase, double fraction)
{
    cancel_at *c = user;
    /* a stage's sub-phases ("graph knn", "graph prune") may still finish after the stop;
     * a later stage must not start */
    if (c->stop && strncmp(phase, c->last, strcspn(c->last, " ")) != 0) c->progress_after++;
    if (c->stop) c->reports_after++;
    if (!c->stop && c->phase && strncmp(phase, c->phase, strlen(c->phase)) == 0 &&
        fraction >= c->after && fraction < 1.0) {
        c->stop = 1;
        snprintf(c->last, sizeof c->last, "%s", phase);
    }
}

static int cancel_poll(void *user)
{
    cancel_at *c = user;
    if (c->stop == 2) c->polls_after_stop++;
    if (c->after < 0) c->stop = 1;
    if (c->stop) c->stop = 2;
    return c->stop != 0;
}

/* A build cancelled from its callbacks at its first poll, mid-k-means, mid-assignment,
 * mid-graph and mid-encoding (1 and 2 threads) returns CHIMERA_ERR_CANCELLED with a
 * message, starts no later stage (k-means, assignment and encoding stop within theirs),
 * never polls again once told to stop, leaves the
 * previous index at its path byte-identical (every section) and opening, and leaves no
 * temporary directory; the uncancelled build then replaces it. */
static void test_cancelled_build_keeps_old(void)
{
    fixture f;
    fixture_make(&f, 300, 64, 8, 60, 21);
    char dir[512], ref[512];
    path_in(dir, sizeof dir, "cancel");
    path_in(ref, sizeof ref, "cancelref");
    chimera_error err;
    CHECK_OK(build(&f.c, dir, 4, 32, 1, 1, &err), &err);
    CHECK_OK(build(&f.c, ref, 4, 32, 1, 1, &err), &err);
    static const struct {
        const char *phase;
        double after;
    } points[] = {{NULL, -1},     {"kmeans", 0.0}, {"kmeans", 0.01}, {"kmeans", 0.3},
                  {"assign", 0.2}, {"graph", 0.0},  {"encode", 0.3}};
    for (int threads = 1; threads <= 2; threads++)
        for (size_t i = 0; i < sizeof points / sizeof *points; i++) {
            cancel_at c = {.phase = points[i].phase, .after = points[i].after};
            ix_build_opts o = {.bits = 4, .n_clusters = 32, .seed = 2, .n_threads = threads,
                               .no_sync = 1, .progress = cancel_progress, .progress_user = &c,
                               .cancel = cancel_poll, .cancel_user = &c};
            const char *at = points[i].phase ? points[i].phase : "first poll";
            memset(&err, 0, sizeof err);
            chimera_status s = ix_build(&f.c, dir, &o, NULL, &err);
            CHECKF(s == CHIMERA_ERR_CANCELLED, "cancel at %s (%d threads): %s: %s", at, threads,
                   chimera_status_str(s), err.msg);
            CHECKF(err.code == CHIMERA_ERR_CANCELLED && strstr(err.msg, "cancelled"),
                   "cancel at %s: message '%s'", at, err.msg);
            CHECKF(c.stop == 2, "cancel at %s: the cancel point was never reached", at);
            CHECKF(c.polls_after_stop == 0, "cancel at %s: polled %d times after the stop", at,
                   c.polls_after_stop);
            CHECKF(c.progress_after == 0, "cancel at %s: %d progress reports of later phases",
                   at, c.progress_after);
            /* k-means, assignment and encoding stop within their phase (of ~200 reports) */
            if (points[i].phase && strcmp(points[i].phase, "graph") != 0)
                CHECKF(c.reports_after < 40, "cancel at %s: %d progress reports after the stop",
                       at, c.reports_after);
            const char *diff;
            CHECKF(same_sections(dir, ref, &diff),
                   "cancel at %s: the old index differs in %s", at, diff);
            ix_index ix;
            if (ix_open(dir, 1, &ix, &err) == CHIMERA_OK) {
                CHECK_OK(ix_check(&ix, &err), &err);
                ix_close(&ix);
            } else {
                CHECKF(0, "cancel at %s: the old index does not open: %s", at, err.msg);
            }
            CHECKF(count_named(".tmp-") == 0, "cancel at %s: a temporary directory remains", at);
        }
    /* A cancel callback that never asks to stop changes nothing. */
    cancel_at never = {0};
    ix_build_opts o = {.bits = 4, .n_clusters = 32, .seed = 1, .n_threads = 2, .no_sync = 1,
                       .cancel = cancel_poll, .cancel_user = &never};
    CHECK_OK(ix_build(&f.c, dir, &o, NULL, &err), &err);
    const char *diff;
    CHECKF(same_sections(dir, ref, &diff), "an uncancelled build differs in %s", diff);
    CHECK(count_named(".tmp-") == 0 && count_named(".old-") == 0);
    rm_rf(dir);
    rm_rf(ref);
    fixture_free(&f);
}

#include "core/clock.h"
#define RUN(fn)                                                                                \
    do {                                                                                       \
        double t0_ = cm_now();                                                                 \
        fn();                                                                                  \
        printf("%-28s %.2fs\n", #fn, cm_now() - t0_);                                          \
    } while (0)

int main(void)
{
    RUN(test_roundtrip);
    RUN(test_msb_planes);
    RUN(test_float16);
    RUN(test_corruption);
    RUN(test_bad_input);
    RUN(test_failed_build_keeps_old);
    RUN(test_cancelled_build_keeps_old);
    return check_report();
}
