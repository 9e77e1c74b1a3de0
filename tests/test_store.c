/* Tests of the index container (src/index/store.h, format.h).
 *
 * What this proves: an index written section by section (whole or streamed in awkward
 * chunk sizes, typed or not, empty or multi-MiB) reads back byte-identical with its meta
 * object, every payload 64-byte aligned; any flipped payload byte is caught by checksum
 * verification, any flipped header byte and any truncation or extension of a section
 * file is caught at open without it, and every such error is CHIMERA_ERR_CORRUPT naming
 * the section; a manifest of another major version is refused with CHIMERA_ERR_VERSION
 * and the "index format X.Y, this library reads 1.x" message, while a newer minor with
 * unknown members is accepted; a missing section file, a manifest whose section size
 * disagrees, and thousands of truncated or bit-flipped manifests never crash and either
 * fail or open to exactly the original content. On the writing side: a build killed
 * before commit (SIGKILL and _exit in a forked child) leaves the previous index intact
 * and loadable; a commit replaces an existing index through both the RENAME_EXCHANGE
 * path and the rename-aside fallback, while an open reader keeps its mapped data; the
 * writer refuses files, symbolic links and non-empty non-index directories (also when
 * one appears between begin and commit) and leaves them untouched; a write failure
 * (RLIMIT_FSIZE) reports the path and leaves nothing behind; the fallback's failure
 * window is reported by open with the side directory's name; and failing the n-th
 * allocation, for every n, over the writer and the reader paths returns
 * CHIMERA_ERR_NOMEM without crashing, leaking (the ASan build checks) or leaving files.
 * Everything runs in a mkdtemp directory under $TMPDIR (or /tmp), removed at the end. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "index/format.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

static char root_dir[512];

/* ---- helpers --------------------------------------------------------------------------- */

static void path_of(char *out, size_t cap, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", root_dir, name);
    if (n < 0 || (size_t)n >= cap) out[0] = '\0'; /* never with the short names used here */
}

static void rm_rf(const char *path)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                rm_rf(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Number of entries of root_dir whose name starts with `prefix`, not counting writer
 * lock files ("<IDX>.lock"), which every writer leaves beside its index for good. */
static int count_prefixed(const char *prefix)
{
    int n = 0;
    DIR *d = opendir(root_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        int lock = len > 5 && strcmp(e->d_name + len - 5, ".lock") == 0;
        if (!lock && strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    }
    if (d) closedir(d);
    return n;
}

/* Removes root_dir entries starting with prefix (stale temporaries of killed builds). */
static void remove_prefixed(const char *prefix)
{
    DIR *d = opendir(root_dir);
    struct dirent *e;
    char names[16][256];
    int n = 0;
    while (d && (e = readdir(d)) != NULL && n < 16)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    if (d) closedir(d);
    for (int i = 0; i < n; i++) {
        char p[1024];
        path_of(p, sizeof p, names[i]);
        rm_rf(p);
    }
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = cm_malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        cm_free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    *len = (size_t)n;
    return b;
}

static void write_all_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, len, f);
    fclose(f);
}

/* ---- a test index ------------------------------------------------------------------------ */

enum { N_SECS = 5 };
static const char *sec_names[N_SECS] = {"centroids", "ids", "empty", "postings", "tail"};
static const uint64_t sec_bytes[N_SECS] = {37 * 8 * 4, 5 * 8, 0, (3u << 20) + 17, 1};

static uint8_t gen_byte(uint64_t seed, int sec, uint64_t i)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)(sec + 1) * 0xBF58476D1CE4E5B9ull ^ i;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (uint8_t)x;
}

static uint8_t *gen_section(uint64_t seed, int sec)
{
    uint8_t *b = cm_malloc(sec_bytes[sec] + 1);
    if (!b) return NULL;
    for (uint64_t i = 0; i < sec_bytes[sec]; i++) b[i] = gen_byte(seed, sec, i);
    return b;
}

static cJSON *make_meta(uint64_t seed)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddNumberToObject(m, "dim", 128);
    cJSON_AddNumberToObject(m, "seed", (double)seed);
    cJSON_AddNumberToObject(m, "third", 1.0 / 3.0);
    cJSON_AddStringToObject(m, "name", "test \"index\"\n\xc3\xa9");
    cJSON *nested = cJSON_AddObjectToObject(m, "nested");
    int v[3] = {1, 2, 3};
    cJSON_AddItemToObject(nested, "list", cJSON_CreateIntArray(v, 3));
    cJSON_AddItemToObject(m, "raw", cJSON_CreateRaw("[1,  2]"));
    return m;
}

/* Writes the test index for `seed` at dir. If stop_after_bytes >= 0, stops in the middle
 * of streaming "postings" and returns CHIMERA_ERR_CANCELLED with the writer still open in
 * *left (for the kill tests). */
static chimera_status write_index_ex(const char *dir, uint64_t seed,
                                     const ix_store_write_opts *opts, int64_t stop_after,
                                     ix_store_writer **left, chimera_error *err)
{
    ix_store_writer *w = NULL;
    chimera_status s = ix_store_writer_begin(dir, opts, &w, err);
    if (s != CHIMERA_OK) return s;
    uint8_t *data[N_SECS] = {0};
    for (int i = 0; i < N_SECS; i++) {
        data[i] = gen_section(seed, i);
        if (!data[i]) {
            s = CHIMERA_ERR_NOMEM;
            ix_store_writer_abort(w);
            goto out;
        }
    }
    ix_store_type tc = {"f32", 2, {37, 8}}, ti = {"i64", 1, {5}};
    if ((s = ix_store_writer_add_typed(w, "centroids", &tc, data[0], sec_bytes[0], err))) goto fail;
    if ((s = ix_store_writer_add_typed(w, "ids", &ti, data[1], sec_bytes[1], err))) goto fail;
    if ((s = ix_store_writer_add(w, "empty", NULL, 0, err))) goto fail;
    if ((s = ix_store_section_begin(w, "postings", NULL, err))) goto fail;
    /* chunk sizes that hit every buffer path: tiny, page, > buffer, exact remainder */
    static const size_t chunks[] = {1, 7, 4096, 1500000, 3, 65536, 2000000};
    uint64_t off = 0;
    for (int c = 0; off < sec_bytes[3]; c = (c + 1) % 7) {
        size_t n = chunks[c];
        if (n > sec_bytes[3] - off) n = (size_t)(sec_bytes[3] - off);
        if (stop_after >= 0 && off >= (uint64_t)stop_after) {
            *left = w;
            s = CHIMERA_ERR_CANCELLED;
            goto out;
        }
        if ((s = ix_store_section_write(w, data[3] + off, n, err))) goto fail;
        off += n;
    }
    if ((s = ix_store_section_end(w, err))) goto fail;
    if ((s = ix_store_writer_add(w, "tail", data[4], 1, err))) goto fail;
    cJSON *meta = make_meta(seed);
    s = ix_store_writer_commit(w, meta, err);
    cJSON_Delete(meta);
    goto out;
fail:
    ix_store_writer_abort(w);
out:
    for (int i = 0; i < N_SECS; i++) cm_free(data[i]);
    return s;
}

static chimera_status write_index(const char *dir, uint64_t seed, const ix_store_write_opts *opts,
                                  chimera_error *err)
{
    return write_index_ex(dir, seed, opts, -1, NULL, err);
}

/* 1 when the store holds exactly the test index of `seed`. */
static int same_content(const store *st, uint64_t seed)
{
    int ok = ix_store_n_sections(st) == N_SECS;
    for (int i = 0; ok && i < N_SECS; i++) {
        const void *p;
        uint64_t n;
        uint8_t *want = gen_section(seed, i);
        ok = want && ix_store_section(st, sec_names[i], &p, &n) == CHIMERA_OK &&
             n == sec_bytes[i] && p != NULL && ((uintptr_t)p % 64) == 0 && memcmp(p, want, n) == 0;
        cm_free(want);
    }
    /* the raw item is stored as the JSON it denotes */
    cJSON *meta = make_meta(seed);
    cJSON_ReplaceItemInObject(meta, "raw", cJSON_Parse("[1,2]"));
    ok = ok && cJSON_Compare(meta, ix_store_meta(st), 1);
    cJSON_Delete(meta);
    return ok;
}

static int index_is(const char *dir, uint64_t seed)
{
    store *st = NULL;
    chimera_error err = {0};
    chimera_status s = ix_store_open(dir, 1, &st, &err);
    if (s != CHIMERA_OK) {
        fprintf(stderr, "open %s: %s\n", dir, err.msg);
        return 0;
    }
    int ok = same_content(st, seed);
    ix_store_close(st);
    return ok;
}

static void section_path(char *out, size_t cap, const char *dir, const char *name)
{
    snprintf(out, cap, "%s/%s.bin", dir, name);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_roundtrip(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "rt");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 1, NULL, &err), &err);
    CHECK(index_is(dir, 1));
    CHECK(count_prefixed("rt.") == 0);

    store *st = NULL;
    CHECK_OK(ix_store_open(dir, 0, &st, &err), &err);
    if (st) {
        uint32_t major = 0, minor = 99;
        ix_store_format_version(st, &major, &minor);
        CHECK(major == FMT_VERSION_MAJOR && minor == FMT_VERSION_MINOR);
        CHECK_OK(ix_store_verify(st, &err), &err);
        const ix_store_section_desc *d = ix_store_section_at(st, 0);
        CHECK(d && strcmp(d->name, "centroids") == 0 && strcmp(d->file, "centroids.bin") == 0);
        CHECK(d && d->dtype && strcmp(d->dtype, "f32") == 0 && d->ndim == 2 &&
              d->shape[0] == 37 && d->shape[1] == 8);
        d = ix_store_section_at(st, 2);
        CHECK(d && d->bytes == 0 && d->dtype == NULL && d->ndim == 0 && d->data != NULL);
        CHECK(ix_store_section_at(st, N_SECS) == NULL);
        CHECK(ix_store_find(st, "tail") == 4 && ix_store_find(st, "nope") == -1);
        const void *p;
        uint64_t n;
        CHECK(ix_store_section(st, "nope", &p, &n) == CHIMERA_ERR_CORRUPT && p == NULL);
        const cJSON *m = ix_store_manifest(st);
        const cJSON *lv = cJSON_GetObjectItemCaseSensitive(m, "library_version");
        CHECK(cJSON_IsString(lv) && strcmp(lv->valuestring, CHIMERA_VERSION_STRING) == 0);
        ix_store_close(st);
    }

    /* ix_store_info: the manifest only */
    st = NULL;
    CHECK_OK(ix_store_info(dir, &st, &err), &err);
    if (st) {
        CHECK(ix_store_n_sections(st) == N_SECS);
        CHECK(ix_store_section_at(st, 3)->data == NULL &&
              ix_store_section_at(st, 3)->bytes == sec_bytes[3]);
        const void *p;
        uint64_t n;
        CHECK(ix_store_section(st, "tail", &p, &n) == CHIMERA_ERR_INVALID_ARG);
        CHECK(ix_store_verify(st, &err) == CHIMERA_ERR_INVALID_ARG);
        CHECK(cJSON_IsObject(ix_store_meta(st)));
        ix_store_close(st);
    }
    /* ix_store_info does not look at section files */
    char sp[700];
    section_path(sp, sizeof sp, dir, "postings");
    CHECK(truncate(sp, 10) == 0);
    st = NULL;
    CHECK_OK(ix_store_info(dir, &st, &err), &err);
    ix_store_close(st);
    rm_rf(dir);
}

static void test_payload_and_header_flips(void)
{
    char dir[600], sp[700];
    path_of(dir, sizeof dir, "flip");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 2, NULL, &err), &err);
    for (int i = 0; i < N_SECS; i++) {
        section_path(sp, sizeof sp, dir, sec_names[i]);
        size_t len;
        uint8_t *orig = read_all(sp, &len);
        CHECK(orig && len == FMT_HEADER_BYTES + sec_bytes[i]);
        if (!orig) continue;
        uint8_t *buf = cm_malloc(len);
        /* payload: first, middle and last bytes */
        uint64_t pos[3] = {0, sec_bytes[i] / 2, sec_bytes[i] ? sec_bytes[i] - 1 : 0};
        for (int k = 0; k < 3 && sec_bytes[i] > 0; k++) {
            memcpy(buf, orig, len);
            buf[FMT_HEADER_BYTES + pos[k]] ^= (uint8_t)(1u << (k + 2));
            write_all_file(sp, buf, len);
            store *st = NULL;
            CHECK_OK(ix_store_open(dir, 0, &st, &err), &err); /* headers are fine */
            if (st) {
                CHECK(ix_store_verify(st, &err) == CHIMERA_ERR_CORRUPT &&
                      strstr(err.msg, sec_names[i]));
                ix_store_close(st);
            }
            st = NULL;
            CHECK_STATUS(ix_store_open(dir, 1, &st, &err), CHIMERA_ERR_CORRUPT, &err);
            CHECKF(strstr(err.msg, sec_names[i]) && strstr(err.msg, "payload checksum"), "%s", err.msg);
            CHECK(st == NULL);
        }
        /* header: one bit of every byte, caught without verification */
        for (int b = 0; b < FMT_HEADER_BYTES; b++) {
            memcpy(buf, orig, len);
            buf[b] ^= (uint8_t)(1u << (b % 8));
            write_all_file(sp, buf, len);
            store *st = NULL;
            chimera_status s = ix_store_open(dir, 0, &st, &err);
            CHECKF(s == CHIMERA_ERR_CORRUPT && strstr(err.msg, sec_names[i]),
                   "header byte %d of %s: %s: %s", b, sec_names[i], chimera_status_str(s), err.msg);
            ix_store_close(st);
        }
        write_all_file(sp, orig, len);
        cm_free(buf);
        cm_free(orig);
    }
    CHECK(index_is(dir, 2));
    rm_rf(dir);
}

static void test_truncation(void)
{
    char dir[600], sp[700];
    path_of(dir, sizeof dir, "trunc");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 3, NULL, &err), &err);
    for (int i = 0; i < N_SECS; i++) {
        section_path(sp, sizeof sp, dir, sec_names[i]);
        size_t len;
        uint8_t *orig = read_all(sp, &len);
        if (!orig) continue;
        size_t cuts[4] = {len - 1, FMT_HEADER_BYTES, FMT_HEADER_BYTES - 1, 0};
        for (int k = 0; k < 4; k++) {
            if (cuts[k] >= len) continue;
            CHECK(truncate(sp, (off_t)cuts[k]) == 0);
            store *st = NULL;
            CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
            CHECKF(strstr(err.msg, sec_names[i]) != NULL, "%s", err.msg);
            write_all_file(sp, orig, len);
        }
        /* one byte too many */
        FILE *f = fopen(sp, "ab");
        fputc(0, f);
        fclose(f);
        store *st = NULL;
        CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, sec_names[i]) != NULL, "%s", err.msg);
        write_all_file(sp, orig, len);
        /* missing file */
        CHECK(unlink(sp) == 0);
        CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, sec_names[i]) && strstr(err.msg, "missing"), "%s", err.msg);
        /* a FIFO in its place: refused, not waited on for a writer that never comes */
        CHECK(mkfifo(sp, 0644) == 0);
        CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, sec_names[i]) != NULL, "%s", err.msg);
        CHECK(unlink(sp) == 0);
        write_all_file(sp, orig, len);
        cm_free(orig);
    }
    /* and in the manifest's place */
    char mp[700], saved[700];
    snprintf(mp, sizeof mp, "%s/%s", dir, FMT_MANIFEST_NAME);
    snprintf(saved, sizeof saved, "%s.saved", dir);
    CHECK(rename(mp, saved) == 0);
    CHECK(mkfifo(mp, 0644) == 0);
    store *st = NULL;
    CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "regular file") != NULL, "%s", err.msg);
    CHECK(unlink(mp) == 0 && rename(saved, mp) == 0);
    CHECK(index_is(dir, 3));
    rm_rf(dir);
}

/* Loads dir's manifest, lets `edit` change it, re-signs it (unless resign == 0), writes. */
static void edit_manifest(const char *dir, void (*edit)(cJSON *), int resign)
{
    char mp[700];
    snprintf(mp, sizeof mp, "%s/%s", dir, FMT_MANIFEST_NAME);
    cJSON *root = NULL;
    chimera_error err;
    if (ix_store_manifest_load(mp, &root, NULL, &err) != CHIMERA_OK) return;
    edit(root);
    if (resign) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "manifest_xxh3");
        uint64_t d = 0;
        ix_store_manifest_digest(root, &d);
        char hex[17];
        ix_fmt_hex_format(hex, d);
        cJSON_AddStringToObject(root, "manifest_xxh3", hex);
    }
    char *text = cJSON_Print(root);
    write_all_file(mp, text, strlen(text));
    cJSON_free(text);
    cJSON_Delete(root);
}

static void edit_major(cJSON *r)
{
    cJSON_ReplaceItemInObject(r, "format_major", cJSON_CreateNumber(3));
    cJSON_ReplaceItemInObject(r, "format_minor", cJSON_CreateNumber(3));
}
static void edit_minor(cJSON *r)
{
    cJSON_ReplaceItemInObject(r, "format_minor", cJSON_CreateNumber(5));
    cJSON_AddStringToObject(r, "added_in_1_5", "an optional member an older reader ignores");
}
static void edit_size(cJSON *r)
{
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "sections"), 4);
    cJSON_ReplaceItemInObject(s, "bytes", cJSON_CreateNumber(2));
}
static void edit_meta(cJSON *r)
{
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "meta"), "dim", cJSON_CreateNumber(129));
}
static void edit_file(cJSON *r)
{
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "sections"), 0);
    cJSON_ReplaceItemInObject(s, "file", cJSON_CreateString("../../etc/passwd"));
}
static void edit_dup(cJSON *r)
{
    cJSON *secs = cJSON_GetObjectItem(r, "sections");
    cJSON_AddItemToArray(secs, cJSON_Duplicate(cJSON_GetArrayItem(secs, 1), 1));
}
static void edit_shape(cJSON *r)
{
    cJSON *s = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "sections"), 0);
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(s, "shape"), 0, cJSON_CreateNumber(36));
}
static void edit_endian(cJSON *r)
{
    cJSON_ReplaceItemInObject(r, "endian", cJSON_CreateString("big"));
}

static void test_manifest_edits(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "man");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 4, NULL, &err), &err);
    char mp[700];
    snprintf(mp, sizeof mp, "%s/%s", dir, FMT_MANIFEST_NAME);
    size_t mlen;
    uint8_t *orig = read_all(mp, &mlen);
    store *st = NULL;

    /* another major: refused before anything else, even without re-signing */
    edit_manifest(dir, edit_major, 0);
    CHECK_STATUS(ix_store_open(dir, 1, &st, &err), CHIMERA_ERR_VERSION, &err);
    CHECKF(strstr(err.msg, "index format 3.3, this library reads 1.x to 2.x") != NULL, "%s", err.msg);
    CHECK_STATUS(ix_store_info(dir, &st, &err), CHIMERA_ERR_VERSION, &err);
    write_all_file(mp, orig, mlen);

    /* a newer minor with a member this reader does not know: accepted */
    edit_manifest(dir, edit_minor, 1);
    CHECK_OK(ix_store_open(dir, 1, &st, &err), &err);
    if (st) {
        uint32_t ma, mi;
        ix_store_format_version(st, &ma, &mi);
        CHECK(ma == 1 && mi == 5);
        CHECK(same_content(st, 4));
        ix_store_close(st);
        st = NULL;
    }
    write_all_file(mp, orig, mlen);

    /* a size that disagrees with the file: caught by the file-size check when the
     * manifest is consistent, by the manifest checksum when it is not */
    edit_manifest(dir, edit_size, 1);
    CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "'tail'") && strstr(err.msg, "expected 66"), "%s", err.msg);
    write_all_file(mp, orig, mlen);
    edit_manifest(dir, edit_size, 0);
    CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "manifest checksum") != NULL, "%s", err.msg);
    write_all_file(mp, orig, mlen);

    /* any change to meta is caught by the manifest checksum */
    edit_manifest(dir, edit_meta, 0);
    CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
    write_all_file(mp, orig, mlen);

    /* consistent (re-signed) but hostile manifests */
    void (*hostile[])(cJSON *) = {edit_file, edit_dup, edit_shape};
    const char *want[] = {"file must be", "appears twice", "shape needs"};
    for (int k = 0; k < 3; k++) {
        edit_manifest(dir, hostile[k], 1);
        CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, want[k]) != NULL, "%s", err.msg);
        write_all_file(mp, orig, mlen);
    }
    edit_manifest(dir, edit_endian, 1);
    CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_UNSUPPORTED, &err);
    write_all_file(mp, orig, mlen);

    /* no manifest at all */
    CHECK(unlink(mp) == 0);
    CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_IO, &err);
    CHECKF(strstr(err.msg, "not a Chimera index") != NULL, "%s", err.msg);
    write_all_file(mp, orig, mlen);
    CHECK(index_is(dir, 4));
    cm_free(orig);
    rm_rf(dir);
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_manifest_fuzz(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "fuzz");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 5, NULL, &err), &err);
    char mp[700];
    snprintf(mp, sizeof mp, "%s/%s", dir, FMT_MANIFEST_NAME);
    size_t mlen;
    uint8_t *orig = read_all(mp, &mlen);
    uint8_t *buf = cm_malloc(mlen + 1);
    int n_err = 0, n_ok = 0, bad_ok = 0;
    const int iters = 3000;
    for (int it = 0; it < iters && orig && buf; it++) {
        memcpy(buf, orig, mlen);
        size_t len = mlen;
        if (it % 3 == 0) {
            len = (size_t)(rng_next() % mlen);
        } else {
            int flips = 1 + (int)(rng_next() % 3);
            for (int f = 0; f < flips; f++) {
                uint64_t r = rng_next();
                buf[(r >> 8) % mlen] ^= (uint8_t)(1u << (r & 7));
            }
        }
        write_all_file(mp, buf, len);
        store *st = NULL;
        chimera_status s = ix_store_open(dir, it % 2, &st, &err);
        if (s == CHIMERA_OK) {
            n_ok++;
            if (!same_content(st, 5)) bad_ok++;
            ix_store_close(st);
        } else {
            n_err++;
            if (st != NULL || err.msg[0] == '\0') bad_ok++;
        }
    }
    /* hand-made garbage */
    static const char *garbage[] = {"", "null", "[]", "{}", "\"chimera-index\"", "{\"magic\":1}",
                                    "{\"magic\":\"chimera-index\",\"format_major\":1e308}",
                                    "{\"magic\":\"chimera-index\",\"format_major\":-1}",
                                    "{\"magic\":\"chimera-index\",\"format_major\":1.5}",
                                    ("{\"magic\":\"chimera-index\",\"format_major\":1,"
                                     "\"format_minor\":0} trailing")};
    for (size_t g = 0; g < sizeof garbage / sizeof garbage[0]; g++) {
        write_all_file(mp, garbage[g], strlen(garbage[g]));
        store *st = NULL;
        chimera_status s = ix_store_open(dir, 1, &st, &err);
        CHECKF(s == CHIMERA_ERR_CORRUPT && st == NULL, "garbage %zu: %s", g, err.msg);
    }
    /* deep nesting (cJSON caps it) */
    char deep[5000];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    write_all_file(mp, deep, strlen(deep));
    store *st = NULL;
    CHECK_STATUS(ix_store_open(dir, 1, &st, &err), CHIMERA_ERR_CORRUPT, &err);
    /* too large to be a manifest: refused before reading */
    FILE *f = fopen(mp, "wb");
    if (f) {
        fseek(f, (long)FMT_MANIFEST_MAX_BYTES + 10, SEEK_SET);
        fputc(' ', f);
        fclose(f);
    }
    CHECK_STATUS(ix_store_open(dir, 1, &st, &err), CHIMERA_ERR_CORRUPT, &err);
    CHECKF(strstr(err.msg, "more than") != NULL, "%s", err.msg);

    printf("manifest fuzz: %d rejected, %d opened (whitespace-only changes)\n", n_err, n_ok);
    CHECK(bad_ok == 0);
    CHECK(n_err > iters * 9 / 10);
    if (orig) write_all_file(mp, orig, mlen);
    CHECK(index_is(dir, 5));
    cm_free(buf);
    cm_free(orig);
    rm_rf(dir);
}

static void test_killed_build(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "kill");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 6, NULL, &err), &err);
    for (int mode = 0; mode < 2; mode++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            ix_store_writer *w = NULL;
            chimera_error cerr;
            chimera_status s = write_index_ex(dir, 60 + (uint64_t)mode, NULL, 1 << 20, &w, &cerr);
            if (s == CHIMERA_ERR_CANCELLED) {
                if (mode == 0) raise(SIGKILL);
                _exit(3);
            }
            _exit(1);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        if (mode == 0) CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        else CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3);
        CHECK(index_is(dir, 6));
        CHECK(count_prefixed("kill.tmp-") == 1); /* the killed build's leftover */
        remove_prefixed("kill.tmp-");
    }
    /* and the next build still replaces it */
    CHECK_OK(write_index(dir, 7, NULL, &err), &err);
    CHECK(index_is(dir, 7));
    rm_rf(dir);
}

static void test_replace(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "rep");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 8, NULL, &err), &err);
    store *reader = NULL;
    CHECK_OK(ix_store_open(dir, 1, &reader, &err), &err);
    /* RENAME_EXCHANGE path */
    CHECK_OK(write_index(dir, 9, NULL, &err), &err);
    CHECK(index_is(dir, 9));
    CHECK(count_prefixed("rep.") == 0);
    /* the reader opened before the replace still sees its own, intact, index */
    if (reader) {
        CHECK(same_content(reader, 8));
        CHECK_OK(ix_store_verify(reader, &err), &err);
        ix_store_close(reader);
    }
    /* rename-aside fallback */
    ix_store_write_opts fb = {.no_exchange = 1};
    CHECK_OK(write_index(dir, 10, &fb, &err), &err);
    CHECK(index_is(dir, 10));
    CHECK(count_prefixed("rep.") == 0);
    /* no_sync */
    ix_store_write_opts ns = {.no_sync = 1};
    CHECK_OK(write_index(dir, 11, &ns, &err), &err);
    CHECK(index_is(dir, 11));
    /* an empty directory is replaced; a trailing slash is fine */
    char empty[600];
    path_of(empty, sizeof empty, "emptydir");
    CHECK(mkdir(empty, 0755) == 0);
    char slashed[700];
    snprintf(slashed, sizeof slashed, "%s//", empty);
    CHECK_OK(write_index(slashed, 12, &fb, &err), &err);
    CHECK(index_is(empty, 12));
    CHECK(count_prefixed("emptydir.") == 0);
    rm_rf(empty);
    rm_rf(dir);

    /* the fallback's window: out_dir missing, the old index aside */
    path_of(dir, sizeof dir, "win");
    CHECK_OK(write_index(dir, 13, NULL, &err), &err);
    char aside[700];
    snprintf(aside, sizeof aside, "%s.old-Ab12Cd", dir);
    CHECK(rename(dir, aside) == 0);
    store *st = NULL;
    CHECK_STATUS(ix_store_open(dir, 1, &st, &err), CHIMERA_ERR_IO, &err);
    CHECKF(strstr(err.msg, "win.old-Ab12Cd") && strstr(err.msg, "interrupted"), "%s", err.msg);
    CHECK(rename(aside, dir) == 0);
    CHECK(index_is(dir, 13));
    rm_rf(dir);
    char nothing[600];
    path_of(nothing, sizeof nothing, "nothing-here");
    CHECK_STATUS(ix_store_open(nothing, 1, &st, &err), CHIMERA_ERR_IO, &err);
    CHECKF(strstr(err.msg, "no such index") != NULL, "%s", err.msg);
}

static void test_refusals(void)
{
    chimera_error err = {0};
    ix_store_writer *w = NULL;
    char dir[600], p[700];

    /* a non-empty directory that is not an index */
    path_of(dir, sizeof dir, "mine");
    CHECK(mkdir(dir, 0755) == 0);
    snprintf(p, sizeof p, "%s/notes.txt", dir);
    write_all_file(p, "keep me", 7);
    CHECK_STATUS(ix_store_writer_begin(dir, NULL, &w, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECKF(strstr(err.msg, dir) && strstr(err.msg, "notes.txt") && strstr(err.msg, "refusing"),
           "%s", err.msg);
    CHECK(w == NULL);
    /* only a manifest.json, but not ours */
    unlink(p);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    write_all_file(p, "{\"hello\": 1}", 12);
    CHECK_STATUS(ix_store_writer_begin(dir, NULL, &w, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECKF(strstr(err.msg, "not a Chimera manifest") != NULL, "%s", err.msg);
    /* *.bin files without a manifest */
    unlink(p);
    snprintf(p, sizeof p, "%s/data.bin", dir);
    write_all_file(p, "x", 1);
    CHECK_STATUS(ix_store_writer_begin(dir, NULL, &w, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECK(access(p, F_OK) == 0);
    CHECK(count_prefixed("mine.") == 0);
    rm_rf(dir);

    /* a file, a symbolic link, a missing parent, an empty path; a refused begin removes
     * nothing, not even a directory that happens to be named like its template */
    path_of(dir, sizeof dir, "afile");
    write_all_file(dir, "data", 4);
    char guard[700];
    snprintf(guard, sizeof guard, "%s.tmp-XXXXXX", dir);
    CHECK(mkdir(guard, 0755) == 0);
    CHECK_STATUS(ix_store_writer_begin(dir, NULL, &w, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECKF(strstr(err.msg, "not a directory") != NULL, "%s", err.msg);
    CHECK(access(guard, F_OK) == 0);
    rmdir(guard);
    path_of(p, sizeof p, "alink");
    CHECK(symlink(dir, p) == 0);
    CHECK_STATUS(ix_store_writer_begin(p, NULL, &w, &err), CHIMERA_ERR_INVALID_ARG, &err);
    CHECKF(strstr(err.msg, "symbolic link") != NULL, "%s", err.msg);
    unlink(p);
    unlink(dir);
    path_of(dir, sizeof dir, "no/such/parent/idx");
    CHECK_STATUS(ix_store_writer_begin(dir, NULL, &w, &err), CHIMERA_ERR_IO, &err);
    CHECKF(strstr(err.msg, "no/such/parent") && strstr(err.msg, "does not exist"), "%s", err.msg);
    CHECK_STATUS(ix_store_writer_begin("", NULL, &w, &err), CHIMERA_ERR_INVALID_ARG, &err);

    /* a directory that appears between begin and commit */
    path_of(dir, sizeof dir, "late");
    CHECK_OK(ix_store_writer_begin(dir, NULL, &w, &err), &err);
    if (w) {
        CHECK_OK(ix_store_writer_add(w, "a", "abc", 3, &err), &err);
        CHECK(mkdir(dir, 0755) == 0);
        snprintf(p, sizeof p, "%s/precious", dir);
        write_all_file(p, "x", 1);
        CHECK_STATUS(ix_store_writer_commit(w, NULL, &err), CHIMERA_ERR_INVALID_ARG, &err);
        CHECK(access(p, F_OK) == 0);
        CHECK(count_prefixed("late.") == 0);
        rm_rf(dir);
    }

    /* misuse of the section calls */
    path_of(dir, sizeof dir, "misuse");
    CHECK_OK(ix_store_writer_begin(dir, NULL, &w, &err), &err);
    if (w) {
        CHECK_OK(ix_store_writer_add(w, "a", "abc", 3, &err), &err);
        CHECK_STATUS(ix_store_writer_add(w, "a", "abc", 3, &err), CHIMERA_ERR_INVALID_ARG, &err);
        const char *bad[] = {"", "a/b", ".hidden", "-x", "has space", "abcdefghijklmnopqrstuvwx",
                             "..", "\xc3\xa9"};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
            CHECK_STATUS(ix_store_writer_add(w, bad[k], "x", 1, &err), CHIMERA_ERR_INVALID_ARG,
                         &err);
        CHECK_STATUS(ix_store_writer_add(w, NULL, "x", 1, &err), CHIMERA_ERR_INVALID_ARG, &err);
        CHECK_OK(ix_store_writer_add(w, "abcdefghijklmnopqrstuvw", "x", 1, &err), &err); /* 23 */
        ix_store_type bt = {"f33", 1, {1}};
        CHECK_STATUS(ix_store_writer_add_typed(w, "t", &bt, "x", 1, &err), CHIMERA_ERR_INVALID_ARG,
                     &err);
        ix_store_type zt = {"f32", 0, {0}};
        CHECK_STATUS(ix_store_writer_add_typed(w, "t", &zt, "x", 1, &err), CHIMERA_ERR_INVALID_ARG,
                     &err);
        CHECK_STATUS(ix_store_section_write(w, "x", 1, &err), CHIMERA_ERR_INVALID_ARG, &err);
        CHECK_STATUS(ix_store_section_end(w, &err), CHIMERA_ERR_INVALID_ARG, &err);
        CHECK_OK(ix_store_section_begin(w, "open", NULL, &err), &err);
        CHECK_STATUS(ix_store_section_begin(w, "other", NULL, &err), CHIMERA_ERR_INVALID_ARG, &err);
        CHECK_STATUS(ix_store_writer_commit(w, NULL, &err), CHIMERA_ERR_INVALID_ARG, &err);
        CHECKF(strstr(err.msg, "still open") != NULL, "%s", err.msg);
        CHECK(count_prefixed("misuse") == 0);
    }
    /* a typed section whose size disagrees fails the writer */
    CHECK_OK(ix_store_writer_begin(dir, NULL, &w, &err), &err);
    if (w) {
        ix_store_type t = {"f32", 2, {3, 4}};
        CHECK_STATUS(ix_store_writer_add_typed(w, "m", &t, "0123456789", 10, &err),
                     CHIMERA_ERR_INVALID_ARG, &err);
        CHECKF(strstr(err.msg, "type says 48") != NULL, "%s", err.msg);
        CHECK_STATUS(ix_store_writer_add(w, "n", "x", 1, &err), CHIMERA_ERR_INVALID_ARG, &err);
        cJSON *arr = cJSON_CreateArray();
        CHECK_STATUS(ix_store_writer_commit(w, arr, &err), CHIMERA_ERR_INVALID_ARG, &err);
        cJSON_Delete(arr);
        CHECK(count_prefixed("misuse") == 0);
    }
    /* meta that is not an object */
    CHECK_OK(ix_store_writer_begin(dir, NULL, &w, &err), &err);
    if (w) {
        cJSON *arr = cJSON_CreateArray();
        CHECK_STATUS(ix_store_writer_commit(w, arr, &err), CHIMERA_ERR_INVALID_ARG, &err);
        cJSON_Delete(arr);
        CHECK(count_prefixed("misuse") == 0);
    }
    /* abort removes everything */
    CHECK_OK(ix_store_writer_begin(dir, NULL, &w, &err), &err);
    if (w) {
        CHECK_OK(ix_store_writer_add(w, "a", "abc", 3, &err), &err);
        CHECK_OK(ix_store_section_begin(w, "b", NULL, &err), &err);
        CHECK_OK(ix_store_section_write(w, "abc", 3, &err), &err);
        CHECK(count_prefixed("misuse.tmp-") == 1);
        ix_store_writer_abort(w);
        CHECK(count_prefixed("misuse") == 0);
    }
    ix_store_writer_abort(NULL);
    ix_store_close(NULL);
}

static void test_write_failure(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "full");
    chimera_error err = {0};
    CHECK_OK(write_index(dir, 14, NULL, &err), &err);
    struct rlimit old;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    struct rlimit small = old;
    small.rlim_cur = 2u << 20; /* the 3 MiB section cannot be written */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    chimera_status s = write_index(dir, 15, NULL, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CHECK(s == CHIMERA_ERR_IO);
    CHECKF(strstr(err.msg, "postings.bin") && strstr(err.msg, "File too large"), "%s", err.msg);
    CHECK(count_prefixed("full.") == 0);
    CHECK(index_is(dir, 14));
    rm_rf(dir);
}

static void test_alloc_failures(void)
{
    char dir[600];
    chimera_error err = {0};
    /* writer: a fresh target, then over an existing index, then the fallback */
    path_of(dir, sizeof dir, "oom");
    /* no_sync: the sync calls allocate nothing, and hundreds of fsyncs would dominate
     * the test's run time */
    ix_store_write_opts ns = {.no_sync = 1}, fb = {.no_exchange = 1, .no_sync = 1};
    for (int pass = 0; pass < 3; pass++) {
        int done = 0, n_fail = 0;
        for (int64_t n = 0; n < 200 && !done; n++) {
            cm_alloc_fail_after(n);
            chimera_status s = write_index(dir, 20 + (uint64_t)pass, pass == 2 ? &fb : &ns, &err);
            cm_alloc_fail_after(-1);
            if (s == CHIMERA_OK) {
                done = 1;
                break;
            }
            n_fail++;
            CHECKF(s == CHIMERA_ERR_NOMEM, "pass %d, n=%lld: %s: %s", pass, (long long)n,
                   chimera_status_str(s), err.msg);
            CHECK(count_prefixed("oom.") == 0);
            if (pass > 0) CHECK(index_is(dir, 20 + (uint64_t)pass - 1));
        }
        CHECK(done && n_fail > 3);
        CHECK(index_is(dir, 20 + (uint64_t)pass));
    }
    /* reader */
    int done = 0;
    for (int64_t n = 0; n < 200 && !done; n++) {
        store *st = NULL;
        cm_alloc_fail_after(n);
        chimera_status s = ix_store_open(dir, 1, &st, &err);
        cm_alloc_fail_after(-1);
        if (s == CHIMERA_OK) {
            done = 1;
            CHECK(same_content(st, 22));
            ix_store_close(st);
            break;
        }
        CHECKF(s == CHIMERA_ERR_NOMEM && st == NULL, "n=%lld: %s", (long long)n, err.msg);
    }
    CHECK(done);
    rm_rf(dir);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root_dir, sizeof root_dir, "%s/chimera-store-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_roundtrip();
    test_payload_and_header_flips();
    test_truncation();
    test_manifest_edits();
    test_manifest_fuzz();
    test_killed_build();
    test_replace();
    test_refusals();
    test_write_failure();
    test_alloc_failures();
    rm_rf(root_dir);
    return check_report();
}
