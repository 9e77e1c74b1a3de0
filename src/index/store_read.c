/* Index container reader (store.h; byte layout in format.h).
 *
 * The manifest and every section file are treated as hostile input (docs/design.md §5.1). The
 * order of checks follows what each one needs in order to be meaningful:
 *   1. the manifest's size against its cap, before reading it; then JSON syntax;
 *   2. the magic, then the major version, before anything else, since another major
 *      may change the rest (so an index from a newer library is reported as a version
 *      problem, not as corruption);
 *   3. the manifest checksum (format.h: the canonical text without "manifest_xxh3");
 *   4. every field of every section entry (types, ranges, unique names, file name ==
 *      name + ".bin", dtype/shape against bytes), all before any section is opened, so
 *      a bad count never turns into a large allocation or a map beyond a file;
 *   5. per section: the file's size against the manifest, then the 64-byte header
 *      (magic, byte order, header checksum, version, name, size, payload checksum, each
 *      compared with the manifest), then, with verification, the payload checksum.
 * Steps 1-5 without the payload hash touch only the manifest and one 64-byte header per
 * section, so opening a large index costs a few system calls per section and no reads
 * of the data; ix_store_info stops after step 4 and maps nothing.
 *
 * One open, one index. The directory is opened once and the manifest and every section
 * are opened relative to that descriptor (openat), so they all come from the same
 * directory even if a writer swaps a new index in meanwhile. Before, the manifest of one
 * index could be paired with the section files of the next, and a search starting
 * during a rebuild got a spurious "corrupt" error. The directory held may still be
 * emptied under the reader (the writer deletes the index it replaced), so an attempt
 * that fails with CHIMERA_ERR_CORRUPT or _IO is retried when the index at the path is
 * no longer the one read: another directory (device and inode differ) or another
 * generation in the manifest read through the path. A real fault is reported after one
 * extra look (the index did not change). While the index keeps changing the reader keeps
 * trying, backing off from 1 ms to 50 ms between attempts so that it finds a gap between
 * commits, for up to STORE_OPEN_RETRY_MS: a fixed number of attempts can be exhausted by
 * writers committing back to back (seen with 3 under a sanitizer's slowdown), and a
 * reader must never report a healthy index as corrupt. Readers take no lock: they may be
 * on read-only media and must never wait for a writer.
 *
 * The manifest is the commit point of the writer (store_write.c), so a directory without
 * one is not an index. If the directory itself is missing, the reader looks beside it for
 * what an interrupted replace may have left ("<dir>.old-*", "<dir>.tmp-*" holding a
 * manifest) and names them in the message, without renaming anything itself. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/mapreg.h"
#include "index/format.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

typedef struct rsection {
    ix_store_section_desc d; /* strings point into the manifest tree */
    void *map;            /* the whole file (header + payload), or NULL */
    size_t map_len;
    int map_reg;          /* cm_map_register handle (0: none) */
} rsection;

/* How long a reader keeps retrying while writers keep changing the index (see the top of
 * the file); as long as a writer waits for the lock. */
#define STORE_OPEN_RETRY_MS 30000

struct store {
    char *dir;
    cJSON *manifest;
    const cJSON *meta;
    uint64_t generation, data_id;
    uint32_t major, minor;
    uint32_t n;
    rsection *secs;
    int mapped;
};

/* ---- manifest text ------------------------------------------------------------------ */

static int json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

chimera_status ix_store_manifest_load(const char *path, cJSON **out, int *err_no,
                                      chimera_error *err)
{
    return ix_store_manifest_loadat(AT_FDCWD, path, path, out, err_no, err);
}

chimera_status ix_store_manifest_loadat(int dirfd, const char *rel, const char *path, cJSON **out,
                                        int *err_no, chimera_error *err)
{
    *out = NULL;
    if (err_no) *err_no = 0;
    /* O_NONBLOCK: a FIFO in the manifest's place must fail the regular-file check
     * below, not block the open (regular files ignore the flag) */
    int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (err_no) *err_no = errno;
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    chimera_status s = CHIMERA_OK;
    char *buf = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        s = cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: not a regular file", path);
        goto done;
    }
    if (sb.st_size > (off_t)FMT_MANIFEST_MAX_BYTES) {
        s = cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: %lld bytes, more than the %u a manifest may have",
                    path, (long long)sb.st_size, FMT_MANIFEST_MAX_BYTES);
        goto done;
    }
    size_t size = (size_t)sb.st_size;
    buf = cm_malloc(size + 1);
    if (!buf) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
            goto done;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, got, &end, 0);
    if (!root) {
        size_t at = end && end >= buf && end <= buf + got ? (size_t)(end - buf) : 0;
        /* cJSON does not say whether it failed for memory or syntax; the size cap makes
         * memory exhaustion here unlikely, so this is reported as a damaged manifest */
        s = cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: not valid JSON (near byte %zu of %zu)", path,
                    at, got);
        goto done;
    }
    const char *p = end ? end : buf + got;
    while (p < buf + got && json_space(*p)) p++;
    if (p != buf + got) {
        cJSON_Delete(root);
        s = cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: unexpected bytes after the JSON (at byte %zu)",
                    path, (size_t)(p - buf));
        goto done;
    }
    *out = root;
done:
    cm_free(buf);
    close(fd);
    return s;
}

int ix_store_manifest_generation(const cJSON *root, uint64_t *gen)
{
    *gen = 0;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "generation");
    if (!g) return 0;
    if (!cJSON_IsNumber(g)) return -1;
    double v = g->valuedouble;
    if (!isfinite(v) || v < 0 || v > FMT_MAX_JSON_INT || floor(v) != v) return -1;
    *gen = (uint64_t)v;
    return 0;
}

int ix_store_manifest_digest(const cJSON *root, uint64_t *digest)
{
    char *text = cJSON_PrintUnformatted(root);
    if (!text) return -1;
    *digest = XXH3_64bits(text, strlen(text));
    cJSON_free(text);
    return 0;
}

/* ---- manifest validation ------------------------------------------------------------ */

/* An integer-valued JSON number in [0, max]. */
static int json_uint(const cJSON *item, double max, uint64_t *out)
{
    if (!cJSON_IsNumber(item)) return 0;
    double v = item->valuedouble;
    if (!isfinite(v) || v < 0 || v > max || floor(v) != v) return 0;
    *out = (uint64_t)v;
    return 1;
}

static const cJSON *member(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

/* Validates one section entry into d. */
static chimera_status check_entry(const store *st, uint32_t i, const cJSON *o,
                                  ix_store_section_desc *d, chimera_error *err)
{
    const char *dir = st->dir;
    if (!cJSON_IsObject(o))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: manifest section %u is not an object", dir, i);
    const cJSON *name = member(o, "name"), *file = member(o, "file"), *off = member(o, "offset"),
                *bytes = member(o, "bytes"), *xxh = member(o, "xxh3"),
                *dtype = member(o, "dtype"), *shape = member(o, "shape");
    if (!cJSON_IsString(name) || !ix_fmt_name_valid(name->valuestring))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: manifest section %u has no valid name",
                       dir, i);
    d->name = name->valuestring;
    char want[FMT_NAME_BYTES + sizeof FMT_SECTION_SUFFIX];
    snprintf(want, sizeof want, "%s%s", d->name, FMT_SECTION_SUFFIX);
    if (!cJSON_IsString(file) || strcmp(file->valuestring, want) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': file must be \"%s\" in the manifest", dir, d->name, want);
    d->file = file->valuestring;
    uint64_t o64;
    if (!json_uint(off, 1e9, &o64) || o64 != FMT_HEADER_BYTES)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': offset must be %d in the manifest", dir, d->name,
                       FMT_HEADER_BYTES);
    double cap = FMT_MAX_JSON_INT;
    if ((double)(SIZE_MAX - FMT_HEADER_BYTES) < cap) cap = (double)(SIZE_MAX - FMT_HEADER_BYTES);
    if (!json_uint(bytes, cap, &d->bytes))
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': size is not an integer in [0, 2^53] in the manifest",
                       dir, d->name);
    if (!cJSON_IsString(xxh) || ix_fmt_hex_parse(xxh->valuestring, &d->xxh3) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': checksum is not 16 hex digits in the manifest", dir,
                       d->name);
    if (!dtype && !shape) return CHIMERA_OK;
    size_t esize = cJSON_IsString(dtype) ? ix_fmt_dtype_size(dtype->valuestring) : 0;
    int nd = cJSON_IsArray(shape) ? cJSON_GetArraySize(shape) : 0;
    if (esize == 0 || nd < 1 || nd > FMT_MAX_DIMS)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': dtype/shape are not a known type with 1..%d dimensions",
                       dir, d->name, FMT_MAX_DIMS);
    d->dtype = dtype->valuestring;
    d->ndim = (uint32_t)nd;
    uint64_t total = esize;
    int overflow = 0;
    for (int k = 0; k < nd; k++) {
        uint64_t v;
        if (!json_uint(cJSON_GetArrayItem(shape, k), FMT_MAX_JSON_INT, &v))
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section '%s': shape[%d] is not an integer in [0, 2^53]", dir,
                           d->name, k);
        d->shape[k] = v;
        if (v != 0 && total > (uint64_t)FMT_MAX_JSON_INT / v) overflow = 1;
        else total *= v;
    }
    if (overflow || total != d->bytes)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': %s shape needs %s%llu bytes, the manifest says %llu",
                       dir, d->name, d->dtype, overflow ? "more than " : "",
                       (unsigned long long)(overflow ? (uint64_t)FMT_MAX_JSON_INT : total),
                       (unsigned long long)d->bytes);
    return CHIMERA_OK;
}

static chimera_status check_manifest(store *st, chimera_error *err)
{
    const char *dir = st->dir;
    cJSON *root = st->manifest;
    if (!cJSON_IsObject(root))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: not a JSON object", dir, FMT_MANIFEST_NAME);
    const cJSON *magic = member(root, "magic");
    if (!cJSON_IsString(magic) || strcmp(magic->valuestring, FMT_MANIFEST_MAGIC) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: not a Chimera index manifest (no \"%s\" magic)",
                       dir, FMT_MANIFEST_NAME, FMT_MANIFEST_MAGIC);
    uint64_t major, minor;
    if (!json_uint(member(root, "format_major"), 65535, &major) ||
        !json_uint(member(root, "format_minor"), 65535, &minor))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: format version is missing or malformed",
                       dir, FMT_MANIFEST_NAME);
    if (major < 1 || major > FMT_MAX_MAJOR)
        return cm_fail(err, CHIMERA_ERR_VERSION,
                       "%s: index format %u.%u, this library reads 1.x to %d.x", dir,
                       (unsigned)major, (unsigned)minor, FMT_MAX_MAJOR);
    st->major = (uint32_t)major;
    st->minor = (uint32_t)minor;

    cJSON *sum = cJSON_DetachItemFromObjectCaseSensitive(root, "manifest_xxh3");
    uint64_t want = 0, got = 0;
    int sum_ok = cJSON_IsString(sum) && ix_fmt_hex_parse(sum->valuestring, &want) == 0;
    cJSON_Delete(sum);
    if (!sum_ok)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: manifest_xxh3 is missing or malformed",
                       dir, FMT_MANIFEST_NAME);
    if (ix_store_manifest_digest(root, &got) != 0)
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    if (got != want)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s/%s: manifest checksum is %016llx, manifest_xxh3 says %016llx (the "
                       "manifest was modified or damaged)", dir, FMT_MANIFEST_NAME,
                       (unsigned long long)got, (unsigned long long)want);

    const cJSON *endian = member(root, "endian");
    if (!cJSON_IsString(endian) || strcmp(endian->valuestring, "little") != 0) {
        if (cJSON_IsString(endian) && strcmp(endian->valuestring, "big") == 0)
            return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                           "%s: a big-endian index; this library reads little-endian ones", dir);
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: endian must be \"little\"", dir,
                       FMT_MANIFEST_NAME);
    }
    if (ix_store_manifest_generation(root, &st->generation) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s/%s: generation is not an integer in [0, 2^53]", dir, FMT_MANIFEST_NAME);
    if (!cJSON_IsString(member(root, "library_version")))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: library_version is missing", dir,
                       FMT_MANIFEST_NAME);
    st->meta = member(root, "meta");
    if (!cJSON_IsObject(st->meta))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: meta is missing or not an object", dir,
                       FMT_MANIFEST_NAME);
    const cJSON *secs = member(root, "sections");
    if (!cJSON_IsArray(secs))
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: sections is missing or not an array", dir,
                       FMT_MANIFEST_NAME);
    int n = cJSON_GetArraySize(secs);
    if (n < 0 || n > FMT_MAX_SECTIONS)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s/%s: %d sections, more than the %d allowed",
                       dir, FMT_MANIFEST_NAME, n, FMT_MAX_SECTIONS);
    st->secs = cm_calloc(n ? (size_t)n : 1, sizeof *st->secs);
    if (!st->secs) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    const cJSON *o;
    uint32_t i = 0;
    cJSON_ArrayForEach(o, secs)
    {
        CM_TRY(check_entry(st, i, o, &st->secs[i].d, err));
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(st->secs[j].d.name, st->secs[i].d.name) == 0)
                return cm_fail(err, CHIMERA_ERR_CORRUPT,
                               "%s: section '%s' appears twice in the manifest", dir,
                               st->secs[i].d.name);
        i++;
        st->n = i;
    }
    /* the data's identity: each section's name, size and checksum, chained in order */
    uint64_t id = 0;
    for (uint32_t k = 0; k < st->n; k++) {
        const ix_store_section_desc *d = &st->secs[k].d;
        uint8_t rec[FMT_NAME_BYTES + 16] = {0};
        memcpy(rec, d->name, strlen(d->name));
        ix_fmt_put_u64(rec + FMT_NAME_BYTES, d->bytes);
        ix_fmt_put_u64(rec + FMT_NAME_BYTES + 8, d->xxh3);
        id = XXH3_64bits_withSeed(rec, sizeof rec, id);
    }
    st->data_id = id;
    return CHIMERA_OK;
}

/* ---- section files ------------------------------------------------------------------ */

static chimera_status map_section(store *st, int dfd, rsection *r, int verify,
                                  chimera_error *err)
{
    const char *dir = st->dir, *nm = r->d.name;
    char *path = cm_path_join(dir, r->d.file);
    if (!path) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    int fd = openat(dfd, r->d.file, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* see manifest_loadat */
    if (fd < 0) {
        int e = errno;
        cm_free(path);
        if (e == ENOENT)
            return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: section '%s': file %s is missing", dir,
                           nm, r->d.file);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: section '%s': cannot open %s: %s", dir, nm,
                       r->d.file, strerror(e));
    }
    struct stat sb;
    uint64_t want = FMT_HEADER_BYTES + r->d.bytes;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        cm_free(path);
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: section '%s': %s is not a regular file",
                       dir, nm, r->d.file);
    }
    if ((uint64_t)sb.st_size != want) {
        close(fd);
        cm_free(path);
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': %s is %lld bytes, expected %llu (64-byte header + "
                       "%llu from the manifest)", dir, nm, r->d.file, (long long)sb.st_size,
                       (unsigned long long)want, (unsigned long long)r->d.bytes);
    }
    void *m = mmap(NULL, (size_t)want, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        cm_free(path);
        return cm_fail(err, e == ENOMEM ? CHIMERA_ERR_NOMEM : CHIMERA_ERR_IO,
                       "%s: section '%s': cannot map %s: %s", dir, nm, r->d.file, strerror(e));
    }
    r->map = m;
    r->map_len = (size_t)want;
    /* sections are replaced only by rename, never truncated in place, but if one is by
     * hand, a front end's SIGBUS handler can then name the file (core/mapreg.h) */
    r->map_reg = cm_map_register(m, (size_t)want, path);
    cm_free(path);
    r->d.data = (const uint8_t *)m + FMT_HEADER_BYTES;

    ix_fmt_section_header h;
    ix_fmt_header_decode(m, &h);
    if (!h.magic_ok)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: section '%s': %s has no section magic",
                       dir, nm, r->d.file);
    if (h.endian_mark != FMT_ENDIAN_MARK)
        return cm_fail(err, h.endian_mark == FMT_ENDIAN_MARK_SWAPPED ? CHIMERA_ERR_UNSUPPORTED
                                                                     : CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': byte-order mark %08x, expected %08x", dir, nm,
                       h.endian_mark, FMT_ENDIAN_MARK);
    if (h.header_check != h.header_check_calc)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': header checksum is %08x, the header says %08x "
                       "(damaged header)", dir, nm, h.header_check_calc, h.header_check);
    if (h.format_major < 1 || h.format_major > st->major) /* 1.x sections stay in a 2.x index */
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': header format %u.%u, the manifest says %u.x", dir, nm,
                       h.format_major, h.format_minor, st->major);
    if (!h.name_ok || strcmp(h.name, nm) != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': its header names section '%.23s'", dir, nm,
                       h.name_ok ? h.name : "(malformed)");
    if (h.payload_bytes != r->d.bytes)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': header says %llu bytes, the manifest %llu", dir, nm,
                       (unsigned long long)h.payload_bytes, (unsigned long long)r->d.bytes);
    if (h.payload_xxh3 != r->d.xxh3)
        return cm_fail(err, CHIMERA_ERR_CORRUPT,
                       "%s: section '%s': header checksum field %016llx, the manifest %016llx",
                       dir, nm, (unsigned long long)h.payload_xxh3,
                       (unsigned long long)r->d.xxh3);
    if (h.reserved != 0)
        return cm_fail(err, CHIMERA_ERR_CORRUPT, "%s: section '%s': reserved header field is %u",
                       dir, nm, h.reserved);
    if (verify) {
        uint64_t got = XXH3_64bits(r->d.data, (size_t)r->d.bytes);
        if (got != r->d.xxh3)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section '%s': payload checksum is %016llx, expected %016llx",
                           dir, nm, (unsigned long long)got, (unsigned long long)r->d.xxh3);
    }
    return CHIMERA_OK;
}

/* ---- open / close --------------------------------------------------------------------- */

/* The directory is missing: name what an interrupted replace may have left beside it. */
static chimera_status report_missing(const char *dir, chimera_error *err)
{
    const char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    size_t plen = slash ? (size_t)(slash - dir) : 0;
    char parent[4096];
    if (plen == 0) snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
    else snprintf(parent, sizeof parent, "%.*s", (int)(plen < 4095 ? plen : 4095), dir);
    char old_name[256] = "", new_name[256] = "";
    size_t blen = strlen(base);
    DIR *d = blen > 0 && blen < 200 ? opendir(parent) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            const char *nm = e->d_name;
            if (strncmp(nm, base, blen) != 0 || strlen(nm) != blen + 11) continue;
            int is_old = strncmp(nm + blen, ".old-", 5) == 0;
            int is_tmp = strncmp(nm + blen, ".tmp-", 5) == 0;
            if (!is_old && !is_tmp) continue;
            char probe[300];
            snprintf(probe, sizeof probe, "%s/%s", nm, FMT_MANIFEST_NAME);
            if (faccessat(dirfd(d), probe, F_OK, 0) != 0) continue; /* an unfinished build */
            char *slot = is_old ? old_name : new_name;
            if (!slot[0]) snprintf(slot, 256, "%s", nm);
        }
        closedir(d);
    }
    if (old_name[0] && new_name[0])
        return cm_fail(err, CHIMERA_ERR_IO,
                       "%s does not exist: an interrupted replace left the previous index at "
                       "%s and the new one at %s (rename one of them to %s)", dir, old_name,
                       new_name, base);
    if (old_name[0] || new_name[0])
        return cm_fail(err, CHIMERA_ERR_IO,
                       "%s does not exist: an interrupted replace left an index at %s (rename "
                       "it to %s)", dir, old_name[0] ? old_name : new_name, base);
    return cm_fail(err, CHIMERA_ERR_IO, "%s: no such index directory", dir);
}

/* Why the directory dir could not be opened (errno e). */
static chimera_status report_unopened(const char *dir, int e, chimera_error *err)
{
    if (e == ENOENT) return report_missing(dir, err);
    if (e == ENOTDIR) return cm_fail(err, CHIMERA_ERR_IO, "%s: not a directory", dir);
    return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", dir, strerror(e));
}

chimera_status ix_store_require_dir(const char *dir, chimera_error *err)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        close(dfd);
        return CHIMERA_OK;
    }
    int e = errno;
    /* missing while its lock file exists: a build may be replacing it (between its two
     * renames where RENAME_EXCHANGE is missing), and the writer that waits for the lock
     * then finds the new one, as ix_store_open retries; no stray lock file comes of it */
    if (e == ENOENT && ix_store_lock_file_exists(dir)) return CHIMERA_OK;
    return report_unopened(dir, e, err);
}

void ix_store_close(store *s)
{
    if (!s) return;
    for (uint32_t i = 0; s->secs && i < s->n; i++)
        if (s->secs[i].map) {
            cm_map_unregister(s->secs[i].map_reg);
            munmap(s->secs[i].map, s->secs[i].map_len);
        }
    cm_free(s->secs);
    cJSON_Delete(s->manifest);
    cm_free(s->dir);
    cm_free(s);
}

/* The generation of the index now at `dir`, read through the path; 0 with *ok = 0 when
 * it cannot be read (the index is missing or in the middle of a replace). */
static uint64_t generation_at(const char *dir, int *ok)
{
    *ok = 0;
    char *mpath = cm_path_join(dir, FMT_MANIFEST_NAME);
    cJSON *root = NULL;
    uint64_t gen = 0;
    if (mpath && ix_store_manifest_load(mpath, &root, NULL, NULL) == CHIMERA_OK)
        *ok = ix_store_manifest_generation(root, &gen) == 0;
    cJSON_Delete(root);
    cm_free(mpath);
    return gen;
}

/* One attempt. *seen receives the identity of the directory it opened (st_ino == 0 when
 * none) and *gen_seen the generation it read (-1 when it got no manifest), so that a
 * failure can be told apart from a change under it. */
static chimera_status open_once(const char *dir, int map, int verify, store **out,
                                struct stat *seen, int64_t *gen_seen, chimera_error *err)
{
    *out = NULL;
    memset(seen, 0, sizeof *seen);
    *gen_seen = -1;
    store *s = cm_calloc(1, sizeof *s);
    char *mpath = NULL;
    int dfd = -1;
    chimera_status st = CHIMERA_OK;
    if (!s || !(s->dir = cm_strdup(dir)) || !(mpath = cm_path_join(dir, FMT_MANIFEST_NAME))) {
        st = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        st = report_unopened(dir, errno, err);
        goto fail;
    }
    if (fstat(dfd, seen) != 0) memset(seen, 0, sizeof *seen);
    int e = 0;
    st = ix_store_manifest_loadat(dfd, FMT_MANIFEST_NAME, mpath, &s->manifest, &e, err);
    if (st == CHIMERA_ERR_IO && e == ENOENT)
        st = cm_fail(err, CHIMERA_ERR_IO, "%s: not a Chimera index (no %s)", dir,
                     FMT_MANIFEST_NAME);
    if (st != CHIMERA_OK) goto fail;
    uint64_t g;
    if (ix_store_manifest_generation(s->manifest, &g) == 0) *gen_seen = (int64_t)g;
    if ((st = check_manifest(s, err)) != CHIMERA_OK) goto fail;
    s->mapped = map;
    for (uint32_t i = 0; map && i < s->n; i++)
        if ((st = map_section(s, dfd, &s->secs[i], verify, err)) != CHIMERA_OK) goto fail;
    close(dfd);
    cm_free(mpath);
    *out = s;
    return CHIMERA_OK;
fail:
    if (dfd >= 0) close(dfd);
    cm_free(mpath);
    ix_store_close(s);
    return st;
}

/* 1 when the index at `dir` is no longer the one an attempt read: another directory, or
 * the same one with another generation, or none at all while a replace is under way. */
static int changed_under(const char *dir, const struct stat *seen, int64_t gen_seen)
{
    struct stat now;
    if (stat(dir, &now) != 0) return seen->st_ino != 0; /* it was there a moment ago */
    if (seen->st_ino == 0) return 1;                    /* it was missing, now it is back */
    if (now.st_dev != seen->st_dev || now.st_ino != seen->st_ino) return 1;
    int ok;
    uint64_t g = generation_at(dir, &ok);
    return gen_seen >= 0 && ok && (int64_t)g != gen_seen;
}

static chimera_status open_impl(const char *dir, int map, int verify, store **out,
                                chimera_error *err)
{
    *out = NULL;
    if (!dir || !dir[0]) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index path is empty");
    chimera_status st = CHIMERA_OK;
    double t0 = cm_now();
    useconds_t nap = 1000;
    for (int attempt = 0;; attempt++) {
        struct stat seen;
        int64_t gen_seen;
        st = open_once(dir, map, verify, out, &seen, &gen_seen, err);
        /* only what a concurrent writer can cause is retried; memory, version and byte
         * order problems are not */
        if (st == CHIMERA_OK || (st != CHIMERA_ERR_CORRUPT && st != CHIMERA_ERR_IO)) break;
        if (!changed_under(dir, &seen, gen_seen)) break;
        if ((cm_now() - t0) * 1000.0 > STORE_OPEN_RETRY_MS) break;
        if (attempt >= 2) { /* the first retries are immediate: one swap needs only one */
            usleep(nap);
            nap = nap * 2 > 50000 ? 50000 : nap * 2;
        }
    }
    return st;
}

chimera_status ix_store_open(const char *dir, int verify_checksums, store **out, chimera_error *err)
{
    return open_impl(dir, 1, verify_checksums, out, err);
}

chimera_status ix_store_info(const char *dir, store **out, chimera_error *err)
{
    return open_impl(dir, 0, 0, out, err);
}

chimera_status ix_store_verify(const store *s, chimera_error *err)
{
    if (!s->mapped)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: opened without its data", s->dir);
    for (uint32_t i = 0; i < s->n; i++) {
        const ix_store_section_desc *d = &s->secs[i].d;
        uint64_t got = XXH3_64bits(d->data, (size_t)d->bytes);
        if (got != d->xxh3)
            return cm_fail(err, CHIMERA_ERR_CORRUPT,
                           "%s: section '%s': payload checksum is %016llx, expected %016llx",
                           s->dir, d->name, (unsigned long long)got,
                           (unsigned long long)d->xxh3);
    }
    return CHIMERA_OK;
}

int64_t ix_store_find(const store *s, const char *name)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (strcmp(s->secs[i].d.name, name) == 0) return i;
    return -1;
}

chimera_status ix_store_section(const store *s, const char *name, const void **data,
                                uint64_t *bytes)
{
    *data = NULL;
    *bytes = 0;
    if (!s->mapped) return CHIMERA_ERR_INVALID_ARG;
    int64_t i = ix_store_find(s, name);
    if (i < 0) return CHIMERA_ERR_CORRUPT;
    *data = s->secs[i].d.data;
    *bytes = s->secs[i].d.bytes;
    return CHIMERA_OK;
}

uint32_t ix_store_n_sections(const store *s)
{
    return s->n;
}

const ix_store_section_desc *ix_store_section_at(const store *s, uint32_t i)
{
    return i < s->n ? &s->secs[i].d : NULL;
}

const cJSON *ix_store_meta(const store *s)
{
    return s->meta;
}
const cJSON *ix_store_manifest(const store *s)
{
    return s->manifest;
}

uint64_t ix_store_generation(const store *s)
{
    return s->generation;
}
uint64_t ix_store_data_id(const store *s)
{
    return s->data_id;
}

void ix_store_format_version(const store *s, uint32_t *major, uint32_t *minor)
{
    if (major) *major = s->major;
    if (minor) *minor = s->minor;
}
