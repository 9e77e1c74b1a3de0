/* Fuzz target for opening an index: the manifest and every section file are hostile
 * input (docs/design.md §5.1), and this drives them through chimera_index_info_read,
 * chimera_index_open (with and without checksum verification) and chimera_index_check.
 * The only property required is "no crash, no sanitizer report, no leak; every call
 * returns CHIMERA_OK or an error with a message".
 *
 * Checksums would stop a byte-level fuzzer at the first gate (a flipped bit anywhere
 * fails the manifest's or a header's XXH3 long before the validation behind it runs),
 * so the input is not the files themselves but a structured description that the
 * target turns into files, recomputing the checksums on the way unless told not to:
 *
 *   u8  flags    bit 0: open with verify (payload checksums recomputed by the reader)
 *                bit 1: keep the manifest's "manifest_xxh3" as given
 *                bit 2: keep each section entry's "bytes" and "xxh3" as given
 *                bit 3: drop "dtype"/"shape" from entries whose size changed, so a
 *                       resized payload reaches the content checks behind them
 *                bit 4: skip chimera_index_check after a successful open
 *   u32 n        manifest length (little-endian; clamped to what is left)
 *   n bytes      manifest.json text. When it parses as a JSON object, every entry of its
 *                "sections" naming a section given below gets that section's true
 *                "bytes" and "xxh3", and "manifest_xxh3" is recomputed (bits 1, 2).
 *                Otherwise it is written as given, reaching the syntax checks.
 *   then sections, until the input ends:
 *   u8  name length (at most 23) and the name; characters outside [A-Za-z0-9_-] are
 *       replaced, so every file stays in the scratch directory
 *   u8  hflags   bit 0: the 64 header bytes follow in the input (else a correct header
 *                is encoded); bit 1: keep that raw header's header_check as given
 *   [64 bytes]   the raw header, when hflags bit 0
 *   u32 n        payload length (clamped to what is left), then the payload
 *
 * Built three ways (tests/CMakeLists.txt):
 *   fuzz_open         libFuzzer (clang -fsanitize=fuzzer): tests/fuzz_open.sh runs it
 *                     for a bounded time from the seeds below; run it by hand for longer
 *                     (tests/README.md).
 *   fuzz_open_replay  a standalone driver with the same target, for every compiler:
 *                       fuzz_open_replay seeds DIR      writes the seed inputs to DIR
 *                       fuzz_open_replay [N] [FILE...]  replays FILEs (crash inputs,
 *                         a corpus), or else the built-in seeds plus N (default 3000)
 *                         random mutations of them, with a fixed RNG seed.
 * The seeds are built at run time (no binary blobs in the tree): small indexes from a
 * synthetic corpus, each encoded in the format above. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>
#include <xxhash.h>

#include "chimera.h"
#include "data/corpus.h"
#include "data/synth.h"
#include "index/format.h"
#include "index/index.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ---- the scratch directory ----------------------------------------------------------- */

static char scratch[256];

static void scratch_clear(void)
{
    DIR *d = opendir(scratch);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
}

static void scratch_remove(void)
{
    if (!scratch[0]) return;
    scratch_clear();
    rmdir(scratch);
}

static void scratch_make(void)
{
    if (scratch[0]) return;
    const char *base = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/chimera-fuzz-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(scratch)) {
        perror("mkdtemp");
        exit(2);
    }
    atexit(scratch_remove);
}

static void write_file(const char *name, const void *a, size_t na, const void *b, size_t nb)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        abort();
    }
    if ((na && fwrite(a, 1, na, f) != na) || (nb && fwrite(b, 1, nb, f) != nb)) {
        perror(path);
        abort();
    }
    fclose(f);
}

/* ---- decoding the input ---------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *p;
    size_t left;
} reader;

static uint8_t get_u8(reader *r)
{
    if (!r->left) return 0;
    r->left--;
    return *r->p++;
}

static uint32_t get_u32(reader *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)get_u8(r) << (8 * i);
    return v;
}

/* Up to n bytes (fewer where the input ends). */
static const uint8_t *get_bytes(reader *r, size_t *n)
{
    if (*n > r->left) *n = r->left;
    const uint8_t *p = r->p;
    r->p += *n;
    r->left -= *n;
    return p;
}

#define MAX_SECTIONS 64

typedef struct fsection {
    char name[FMT_NAME_BYTES];
    uint8_t hflags;
    const uint8_t *raw_header; /* 64 bytes or NULL */
    const uint8_t *payload;
    size_t bytes;
} fsection;

static int find_section(const fsection *s, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0) return i;
    return -1;
}

/* The manifest with the given sections' true sizes and checksums, and its own checksum
 * recomputed; NULL when the text is not a JSON object (then it is written as given). */
static char *fix_manifest(const uint8_t *text, size_t n, uint8_t flags, const fsection *s,
                          int ns)
{
    cJSON *root = cJSON_ParseWithLength((const char *)text, n);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON *secs = cJSON_GetObjectItemCaseSensitive(root, "sections"), *e;
    if (!(flags & 4)) {
        cJSON_ArrayForEach(e, secs)
        {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            int i = cJSON_IsString(name) ? find_section(s, ns, name->valuestring) : -1;
            if (i < 0 || !cJSON_IsObject(e)) continue;
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes");
            int resized = !cJSON_IsNumber(b) || b->valuedouble != (double)s[i].bytes;
            char hex[17];
            ix_fmt_hex_format(hex, XXH3_64bits(s[i].payload, s[i].bytes));
            cJSON_DeleteItemFromObjectCaseSensitive(e, "bytes");
            cJSON_DeleteItemFromObjectCaseSensitive(e, "xxh3");
            cJSON_AddNumberToObject(e, "bytes", (double)s[i].bytes);
            cJSON_AddStringToObject(e, "xxh3", hex);
            if (resized && (flags & 8)) {
                cJSON_DeleteItemFromObjectCaseSensitive(e, "dtype");
                cJSON_DeleteItemFromObjectCaseSensitive(e, "shape");
            }
        }
    }
    if (!(flags & 2)) {
        /* as the writer does: the digest of the canonical text without the member, then
         * the member appended last */
        cJSON_DeleteItemFromObjectCaseSensitive(root, "manifest_xxh3");
        uint64_t digest;
        char hex[17];
        if (ix_store_manifest_digest(root, &digest) == 0) {
            ix_fmt_hex_format(hex, digest);
            cJSON_AddStringToObject(root, "manifest_xxh3", hex);
        }
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}

/* What the last input's open and check returned (the standalone driver requires the
 * seeds to pass both, which proves the checksums are recomputed as the reader expects,
 * and reports how far the mutations got). */
static chimera_status last_open, last_check;

/* Every call must end in OK or in an error that says what is wrong. */
static void require(chimera_status s, const char *msg, const char *what)
{
    if (s != CHIMERA_OK && (!msg || !msg[0])) {
        fprintf(stderr, "fuzz_open: %s returned %s without a message\n", what,
                chimera_status_str(s));
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    scratch_make();
    scratch_clear();
    reader r = {data, size};
    uint8_t flags = get_u8(&r);
    size_t mlen = get_u32(&r);
    const uint8_t *mtext = get_bytes(&r, &mlen);
    fsection sec[MAX_SECTIONS];
    int ns = 0;
    while (r.left && ns < MAX_SECTIONS) {
        fsection *s = &sec[ns];
        memset(s, 0, sizeof *s);
        size_t nl = get_u8(&r) % FMT_NAME_BYTES;
        const uint8_t *name = get_bytes(&r, &nl);
        for (size_t i = 0; i < nl; i++) {
            char c = (char)name[i];
            int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                     ((c == '_' || c == '-') && i > 0);
            s->name[i] = ok ? c : 'x';
        }
        s->hflags = get_u8(&r);
        if (s->hflags & 1) {
            size_t n = FMT_HEADER_BYTES;
            s->raw_header = get_bytes(&r, &n);
            if (n < FMT_HEADER_BYTES) break;
        }
        s->bytes = get_u32(&r);
        s->payload = get_bytes(&r, &s->bytes);
        if (nl == 0) continue; /* no file name: the record only consumes input */
        ns++;
    }

    char *manifest = fix_manifest(mtext, mlen, flags, sec, ns);
    if (manifest) write_file(FMT_MANIFEST_NAME, manifest, strlen(manifest), NULL, 0);
    else write_file(FMT_MANIFEST_NAME, mtext, mlen, NULL, 0);
    cJSON_free(manifest);
    for (int i = 0; i < ns; i++) {
        fsection *s = &sec[i];
        uint8_t hdr[FMT_HEADER_BYTES];
        if (s->raw_header) {
            memcpy(hdr, s->raw_header, sizeof hdr);
            if (!(s->hflags & 2)) ix_fmt_put_u32(hdr + 60, (uint32_t)XXH3_64bits(hdr, 60));
        } else {
            ix_fmt_header_encode(hdr, s->name, FMT_VERSION_MAJOR, FMT_VERSION_MINOR, s->bytes, XXH3_64bits(s->payload, s->bytes));
        }
        char file[FMT_NAME_BYTES + 8];
        memcpy(file, s->name, FMT_NAME_BYTES); /* NUL-terminated: at most 23 characters */
        strcat(file, FMT_SECTION_SUFFIX);
        write_file(file, hdr, sizeof hdr, s->payload, s->bytes);
    }

    chimera_error err = {0};
    chimera_index_info *info = cm_malloc(sizeof *info);
    if (!info) abort();
    chimera_status st = chimera_index_info_read(scratch, info, &err);
    require(st, err.msg, "chimera_index_info_read");
    cm_free(info);
    chimera_open_opts oo = {.verify = flags & 1};
    chimera_index *ix = NULL;
    memset(&err, 0, sizeof err);
    st = chimera_index_open(scratch, &oo, &ix, &err);
    require(st, err.msg, "chimera_index_open");
    last_open = st;
    last_check = CHIMERA_ERR_INTERNAL; /* not run */
    if (st == CHIMERA_OK && !(flags & 16)) {
        st = chimera_index_check(ix, &err);
        require(st, err.msg, "chimera_index_check");
        last_check = st;
    }
    chimera_index_close(ix);
    return 0;
}

/* ---- seeds ----------------------------------------------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *q = cm_realloc(b->p, cap);
        if (!q) abort();
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void put_u8(buf *b, uint8_t v) { put(b, &v, 1); }

static void put_u32(buf *b, uint32_t v)
{
    uint8_t q[4];
    ix_fmt_put_u32(q, v);
    put(b, q, 4);
}

static uint8_t *read_whole(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    buf b = {0};
    uint8_t tmp[65536];
    size_t got;
    while ((got = fread(tmp, 1, sizeof tmp, f)) > 0) put(&b, tmp, got);
    fclose(f);
    *n = b.n;
    if (!b.p) b.p = cm_malloc(1);
    return b.p;
}

/* Encodes the index at `dir` as one input (flags as given). */
static int encode_index(const char *dir, uint8_t flags, buf *out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, FMT_MANIFEST_NAME);
    size_t mn;
    uint8_t *m = read_whole(path, &mn);
    if (!m) return -1;
    put_u8(out, flags);
    put_u32(out, (uint32_t)mn);
    put(out, m, mn);
    cJSON *root = cJSON_ParseWithLength((const char *)m, mn);
    cm_free(m);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "sections"))
    {
        const char *name = cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring;
        snprintf(path, sizeof path, "%s/%s%s", dir, name, FMT_SECTION_SUFFIX);
        size_t n;
        uint8_t *f = read_whole(path, &n);
        if (!f || n < FMT_HEADER_BYTES) {
            cm_free(f);
            cJSON_Delete(root);
            return -1;
        }
        put_u8(out, (uint8_t)strlen(name));
        put(out, name, strlen(name));
        put_u8(out, 0);
        put_u32(out, (uint32_t)(n - FMT_HEADER_BYTES));
        put(out, f + FMT_HEADER_BYTES, n - FMT_HEADER_BYTES);
        cm_free(f);
    }
    cJSON_Delete(root);
    return 0;
}

/* Small indexes of differing shapes: B = 1, 2 and 8, one cluster, one-token documents;
 * stored vectors (the re-rank tier) in bf16 and f16. */
static int make_seeds(buf *seeds, int max)
{
    static const struct {
        int64_t docs;
        uint32_t dim, min_len, max_len, k, bits;
        int rerank;
    } shape[] = {{12, 8, 2, 6, 4, 2, CHIMERA_RERANK_BF16}, {6, 3, 1, 1, 1, 1, 0},
                 {9, 70, 3, 5, 3, 8, CHIMERA_RERANK_F16}};
    int n = 0;
    scratch_make();
    for (size_t i = 0; i < sizeof shape / sizeof shape[0] && n < max; i++) {
        chimera_synth_opts so = {.n_docs = shape[i].docs, .dim = shape[i].dim, .n_queries = 1,
                                 .seed = 11 + i, .min_len = shape[i].min_len,
                                 .max_len = shape[i].max_len};
        data_synth_corpus sc;
        data_corpus c;
        chimera_error err;
        char dir[300];
        snprintf(dir, sizeof dir, "%s.seed", scratch);
        if (data_synth_generate(&so, &sc, &err) != CHIMERA_OK) {
            fprintf(stderr, "seed %zu: %s\n", i, err.msg);
            return -1;
        }
        chimera_status s = data_corpus_wrap(&c, sc.tokens, sc.n_tokens, sc.dim, sc.doclens,
                                            sc.n_docs, NULL, NULL, &err);
        if (s == CHIMERA_OK) {
            ix_build_opts bo = {.bits = shape[i].bits, .n_clusters = shape[i].k,
                                .graph_degree = 2, .n_threads = 1, .seed = 5, .no_sync = 1,
                                .rerank = shape[i].rerank};
            s = ix_build(&c, dir, &bo, NULL, &err);
            data_corpus_free(&c);
        }
        data_synth_free(&sc);
        if (s != CHIMERA_OK) {
            fprintf(stderr, "seed %zu: %s\n", i, err.msg);
            return -1;
        }
        /* the plain seed, and one asking for verification */
        memset(&seeds[n], 0, sizeof seeds[n]);
        int bad = encode_index(dir, 0, &seeds[n]) != 0;
        if (!bad) n++;
        if (!bad && n < max) {
            memset(&seeds[n], 0, sizeof seeds[n]);
            bad = encode_index(dir, 1, &seeds[n]) != 0;
            if (!bad) n++;
        }
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0 || bad) {
            fprintf(stderr, "seed %zu: cannot encode or remove %s\n", i, dir);
            return -1;
        }
    }
    return n;
}

/* Writes the seed inputs to the directory `out` (created if missing); 0 on success. */
static int write_seeds(const char *out)
{
    buf seeds[8];
    int n = make_seeds(seeds, 8);
    if (n <= 0) return 1;
    mkdir(out, 0755);
    for (int i = 0; i < n; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/seed-%d", out, i);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(seeds[i].p, 1, seeds[i].n, f) != seeds[i].n) {
            perror(path);
            return 1;
        }
        fclose(f);
        cm_free(seeds[i].p);
    }
    printf("fuzz_open: %d seeds in %s\n", n, out);
    return 0;
}

/* ---- the standalone driver -------------------------------------------------------------- */

#ifdef FUZZ_STANDALONE

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    /* splitmix64: fixed seed, so a failure is reproducible by its iteration number */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Tokens worth splicing into manifests: numbers a count must refuse, and JSON of the
 * wrong type. */
static const char *const dict[] = {"1e300", "-5",   "3.7",   "4294967296", "-0",  "1e-300",
                                   "null",  "true", "\"x\"", "[]",         "{}",  "NaN",
                                   "9007199254740993", "18446744073709551616", "0", "1"};

/* One to three random edits of b, biased towards the manifest (it comes first and holds
 * the counts). */
static void mutate(buf *b)
{
    int edits = 1 + (int)(rnd() % 3);
    for (int e = 0; e < edits; e++) {
        size_t n = b->n;
        if (n == 0) return;
        size_t at = rnd() % 4 == 0 ? rnd() % n : rnd() % (n < 2048 ? n : 2048);
        switch (rnd() % 6) {
        case 0: b->p[at] ^= (uint8_t)(1u << (rnd() % 8)); break;
        case 1: b->p[at] = (uint8_t)rnd(); break;
        case 2: {
            static const uint8_t v[] = {0, 1, 0x7f, 0x80, 0xff};
            b->p[at] = v[rnd() % sizeof v];
            break;
        }
        case 3: { /* delete a run */
            size_t len = 1 + rnd() % 16;
            if (at + len > n) len = n - at;
            memmove(b->p + at, b->p + at + len, n - at - len);
            b->n -= len;
            break;
        }
        case 4: { /* splice a token over a run of digits or anywhere */
            const char *t = dict[rnd() % (sizeof dict / sizeof dict[0])];
            size_t tl = strlen(t), old = 0;
            while (at + old < n && old < 24 &&
                   ((b->p[at + old] >= '0' && b->p[at + old] <= '9') || b->p[at + old] == '.'))
                old++;
            buf c = {0};
            put(&c, b->p, at);
            put(&c, t, tl);
            put(&c, b->p + at + old, n - at - old);
            cm_free(b->p);
            *b = c;
            break;
        }
        default: /* truncate */
            b->n = at;
            break;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "seeds") == 0) return write_seeds(argv[2]);
    long runs = 3000;
    int first = 1;
    if (argc > 1 && argv[1][0] >= '0' && argv[1][0] <= '9') {
        runs = strtol(argv[1], NULL, 10);
        first = 2;
    }
    long opened = 0, checked = 0;
    if (first < argc) { /* replay the given inputs */
        for (int i = first; i < argc; i++) {
            size_t n;
            uint8_t *p = read_whole(argv[i], &n);
            if (!p) {
                perror(argv[i]);
                return 1;
            }
            LLVMFuzzerTestOneInput(p, n);
            opened += last_open == CHIMERA_OK;
            checked += last_check == CHIMERA_OK;
            cm_free(p);
        }
        printf("fuzz_open: %d inputs replayed, no crash (%ld opened, %ld passed check)\n",
               argc - first, opened, checked);
        return 0;
    }
    buf seeds[8];
    int ns = make_seeds(seeds, 8);
    if (ns <= 0) return 1;
    for (int i = 0; i < ns; i++) {
        LLVMFuzzerTestOneInput(seeds[i].p, seeds[i].n);
        if (last_open != CHIMERA_OK || last_check != CHIMERA_OK) {
            fprintf(stderr, "fuzz_open: seed %d does not open and check (%s, %s)\n", i,
                    chimera_status_str(last_open), chimera_status_str(last_check));
            return 1;
        }
    }
    for (long r = 0; r < runs; r++) {
        const buf *s = &seeds[rnd() % (uint64_t)ns];
        buf m = {0};
        put(&m, s->p, s->n);
        mutate(&m);
        if (getenv("FUZZ_OPEN_VERBOSE")) fprintf(stderr, "run %ld: %zu bytes\n", r, m.n);
        LLVMFuzzerTestOneInput(m.p, m.n);
        opened += last_open == CHIMERA_OK;
        checked += last_check == CHIMERA_OK;
        cm_free(m.p);
    }
    for (int i = 0; i < ns; i++) cm_free(seeds[i].p);
    printf("fuzz_open: %d seeds and %ld mutations, no crash (%ld opened, %ld passed check)\n",
           ns, runs, opened, checked);
    return 0;
}

#else

/* libFuzzer: "-seeds=DIR" (our flag; libFuzzer ignores what it does not know) writes the
 * seed inputs to DIR and exits, so one binary both makes and fuzzes its corpus. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    for (int i = 1; i < *argc; i++)
        if (strncmp((*argv)[i], "-seeds=", 7) == 0) exit(write_seeds((*argv)[i] + 7));
    return 0;
}

#endif
