/* Index container writer (store.h; byte layout in format.h).
 *
 * Who may change an index when (the writer lock, generations, clean-up of what killed
 * writers left) is the protocol in store.h and store_lock.c; this file follows it at
 * begin and at commit.
 *
 * Order of operations, LMDB's: data, sync, then meta. Every section goes to its own file
 * inside a temporary directory "<out_dir>.tmp-XXXXXX" created beside the target (same
 * parent, hence the same file system, so the final rename is atomic). A section file
 * gets a placeholder header, then its payload, hashed with XXH3 as it streams; at its end
 * the real header (size and checksum) is written over the placeholder and the file is
 * fsynced and closed, so no descriptor stays open across sections. Commit then writes
 * manifest.json, the commit point, last, through core/fileio's cm_writer (temporary
 * file, fsync, rename, fsync of the directory). Only after the manifest is durable is the
 * directory put in place:
 *
 *   target absent:      rename(tmp, out_dir)
 *   target exists:      renameat2(tmp, out_dir, RENAME_EXCHANGE) swaps the two
 *                       directories in one step; the old index, now at the tmp name, is
 *                       deleted afterwards. Readers that have the old one open keep
 *                       their mappings (unlinked files stay mapped).
 *   no RENAME_EXCHANGE  (EINVAL / ENOSYS / ENOTSUP from file systems or kernels that
 *   (fallback):         lack it) rename(out_dir, "<out_dir>.old-XXXXXX"), then
 *                       rename(tmp, out_dir), then delete the old one. If the second
 *                       rename fails the first is undone.
 *   then:               fsync of the parent directory.
 *
 * Failure windows. Before the swap, a crash or kill leaves the old index untouched and a
 * stale "<out_dir>.tmp-XXXXXX" beside it (never loaded; the next writer removes it once
 * no build claims it: store_lock.c). With RENAME_EXCHANGE there is no moment at which
 * out_dir is missing or partial. In the fallback, a crash between its two renames leaves
 * out_dir absent, the old index complete at "<out_dir>.old-XXXXXX" and the new one
 * complete (manifest included) at the tmp name; ix_store_open of out_dir then reports both
 * names so the user can rename one into place. It reports rather than repairs: a reader
 * that renames directories could race a writer (and writers leave both alone while
 * out_dir is missing).
 *
 * What may be replaced: an absent path, an empty directory, or an index (a directory
 * whose manifest.json carries the index magic and that holds nothing but manifest.json,
 * *.bin files and the manifest temporaries a killed meta update may leave; the writer
 * removes those under the lock, and before it tolerated none, so a killed tune made
 * every later build refuse to replace the index). A non-empty directory of anything
 * else, a file or a symbolic link is refused at begin and again at commit (it may have
 * changed in between), so the writer never deletes data it did not write.
 *
 * Concurrency. Begin takes the writer lock to clean up after killed writers, create the
 * temporary directory and claim it (an flock on it, held until commit or abort, which
 * tells other writers' clean-up that this build is alive); commit takes it again for
 * the generation, the manifest and the swap. Between the two the build computes without
 * it, so a long build never holds up a tune's profile save, and of two builds of one
 * index the one that commits last wins (each is complete, and each is numbered after
 * the index it replaced).
 *
 * Tried and rejected: writing all sections into one file (a single mmap, but appending
 * a section later would rewrite everything, and per-file checksums localise damage);
 * keeping section files open until commit to fsync them together (saves nothing on
 * Linux, and a build with dozens of sections would hold dozens of descriptors). */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE (glibc >= 2.28) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t by value: no hidden malloc */
#include <xxhash.h>

#include "core/error.h"
#include "core/fileio.h"
#include "index/format.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

/* Streaming buffer: small writes (a posting list at a time) are gathered into 1 MiB
 * before a write(2), large ones go straight through. */
#define STORE_BUF_BYTES (1u << 20)

typedef struct wsection {
    char name[FMT_NAME_BYTES];
    uint64_t bytes, xxh3;
    char dtype[8]; /* "" when untyped */
    uint32_t ndim;
    uint64_t shape[FMT_MAX_DIMS];
} wsection;

struct ix_store_writer {
    XXH3_state_t hash; /* first: it needs 64-byte alignment (the writer is aligned) */
    char *out_dir;     /* target, without trailing slashes */
    char *parent;      /* its directory */
    char *tmp_dir;     /* "<out_dir>.tmp-XXXXXX" */
    ix_store_write_opts opts;
    wsection *secs;
    uint32_t n_secs, cap_secs;
    int fd;            /* open section file, or -1 */
    int tmp_fd;        /* tmp_dir, flocked: marks it live for other writers' clean-up */
    char *cur_path;    /* its path */
    wsection cur;
    uint8_t *buf;
    size_t buf_used;
    chimera_error failed; /* sticky: code != OK once an I/O or memory error happened */
    uint16_t major, minor; /* written into section headers and the manifest */
    /* in place (ix_store_delta_begin): sections go into the index directory itself,
     * next to the ones the current manifest lists (keep) */
    int in_place;
    wsection *keep;
    uint32_t n_keep;
    uint64_t base_gen;
};

/* ---- small helpers ----------------------------------------------------------------- */

static char *concat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *p = cm_malloc(na + nb + 1);
    if (!p) return NULL;
    memcpy(p, a, na);
    memcpy(p + na, b, nb + 1);
    return p;
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

/* Writes all of p[0..n) at the current offset; 0 or an errno. */
static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *c = p;
    while (n > 0) {
        ssize_t r = write(fd, c, n);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return EIO;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
    const uint8_t *c = p;
    while (n > 0) {
        ssize_t r = pwrite(fd, c, n, off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return EIO;
        c += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

/* Removes a directory this library wrote (files only, no subdirectories) and the
 * directory itself. Best effort: returns 0 when the directory is gone. */
static int remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        int dfd = dirfd(d);
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            unlinkat(dfd, e->d_name, 0);
        }
        closedir(d);
    }
    return rmdir(dir) == 0 || errno == ENOENT ? 0 : -1;
}

/* ---- what may be replaced -------------------------------------------------------------
 * The writer deletes the directory it replaces, so it must be sure that directory is an
 * index (or empty). The test is deliberately narrow: the manifest parses and carries the
 * magic, and nothing but manifest.json and *.bin files is inside. A damaged index whose
 * manifest no longer parses is refused too; the message says to delete it by hand. */

enum { TARGET_ABSENT, TARGET_EMPTY, TARGET_INDEX };

/* *gen receives the target's generation: its manifest's, 0 when absent, malformed (a
 * damaged index may still be replaced) or from before format 1.1, and 0 for an absent
 * or empty target. */
static chimera_status classify_target(const char *dir, int *kind, uint64_t *gen,
                                      chimera_error *err)
{
    *gen = 0;
    struct stat sb;
    if (lstat(dir, &sb) != 0) {
        if (errno == ENOENT) {
            *kind = TARGET_ABSENT;
            return CHIMERA_OK;
        }
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot stat: %s", dir, strerror(errno));
    }
    if (S_ISLNK(sb.st_mode))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s is a symbolic link; refusing to replace it (give the directory "
                       "it points to)", dir);
    if (!S_ISDIR(sb.st_mode))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s exists and is not a directory; refusing to replace it", dir);
    DIR *d = opendir(dir);
    if (!d) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot list: %s", dir, strerror(errno));
    int n = 0, manifest = 0;
    char foreign[64] = "";
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
        n++;
        struct stat fs;
        int regular = fstatat(dirfd(d), nm, &fs, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(fs.st_mode);
        if (regular && strcmp(nm, FMT_MANIFEST_NAME) == 0) manifest = 1;
        else if (!(regular && (has_suffix(nm, FMT_SECTION_SUFFIX) || ix_store_is_manifest_tmp(nm) ||
                               ix_store_is_side_file(nm))) &&
                 !foreign[0])
            snprintf(foreign, sizeof foreign, "%.63s", nm);
    }
    closedir(d);
    if (n == 0) {
        *kind = TARGET_EMPTY;
        return CHIMERA_OK;
    }
    if (foreign[0])
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s is not empty and is not a Chimera index (it holds '%s'); "
                       "refusing to replace it", dir, foreign);
    if (!manifest)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s is not empty and has no %s, so it is not a Chimera index; "
                       "refusing to replace it", dir, FMT_MANIFEST_NAME);
    char *mpath = cm_path_join(dir, FMT_MANIFEST_NAME);
    if (!mpath) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    cJSON *root = NULL;
    chimera_error lerr;
    chimera_status s = ix_store_manifest_load(mpath, &root, NULL, &lerr);
    cm_free(mpath);
    if (s == CHIMERA_ERR_NOMEM) return cm_fail(err, s, "%s: out of memory", dir);
    const cJSON *magic = root ? cJSON_GetObjectItemCaseSensitive(root, "magic") : NULL;
    int ok = s == CHIMERA_OK && cJSON_IsString(magic) &&
             strcmp(magic->valuestring, FMT_MANIFEST_MAGIC) == 0;
    if (ok && ix_store_manifest_generation(root, gen) != 0) *gen = 0;
    cJSON_Delete(root);
    if (!ok)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s: %s is not a Chimera manifest; refusing to replace the directory "
                       "(if it is a damaged index, delete it first)", dir, FMT_MANIFEST_NAME);
    *kind = TARGET_INDEX;
    return CHIMERA_OK;
}

/* ---- begin / abort ------------------------------------------------------------------- */

static void writer_free(ix_store_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    if (w->tmp_fd >= 0) close(w->tmp_fd);
    cm_free(w->keep);
    cm_free(w->cur_path);
    cm_free(w->buf);
    cm_free(w->secs);
    cm_free(w->tmp_dir);
    cm_free(w->parent);
    cm_free(w->out_dir);
    cm_free(w);
}

/* An in-place writer's files: no manifest lists them, so removing them is the abort. */
static void remove_written(ix_store_writer *w)
{
    if (w->cur_path) unlink(w->cur_path);
    for (uint32_t i = 0; i < w->n_secs; i++) {
        char file[FMT_NAME_BYTES + sizeof FMT_SECTION_SUFFIX];
        snprintf(file, sizeof file, "%s%s", w->secs[i].name, FMT_SECTION_SUFFIX);
        char *path = cm_path_join(w->tmp_dir, file);
        if (path) unlink(path);
        cm_free(path);
    }
}

void ix_store_writer_abort(ix_store_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    if (w->in_place) remove_written(w);
    else if (w->tmp_dir) remove_tree(w->tmp_dir);
    writer_free(w); /* closes tmp_fd, dropping the claim only once the directory is gone */
}

chimera_status ix_store_writer_begin(const char *out_dir, const ix_store_write_opts *opts,
                                     ix_store_writer **out, chimera_error *err)
{
    *out = NULL;
    if (!out_dir || !out_dir[0])
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index path is empty");
    if (!ix_fmt_host_little_endian())
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "%s: the index format is little-endian; this host is not", out_dir);
    size_t n = strlen(out_dir);
    while (n > 1 && out_dir[n - 1] == '/') n--;
    if (n == 1 && out_dir[0] == '/')
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "refusing to write an index at /");

    ix_store_writer *w = cm_aligned_alloc(64, sizeof *w);
    if (!w) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", out_dir);
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->tmp_fd = -1;
    if (opts) w->opts = *opts;
    w->major = FMT_VERSION_MAJOR;
    w->minor = FMT_VERSION_MINOR;
    chimera_status s = CHIMERA_OK;
    ix_store_lock *lock = NULL;
    /* the mkdtemp template stays out of w->tmp_dir until the directory exists, so that
     * abort never removes a path this writer did not create */
    char *tmpl = NULL;
    w->out_dir = cm_malloc(n + 1);
    if (w->out_dir) {
        memcpy(w->out_dir, out_dir, n);
        w->out_dir[n] = '\0';
        w->parent = cm_path_dir(w->out_dir);
        tmpl = concat(w->out_dir, ".tmp-XXXXXX");
    }
    w->buf = cm_malloc(STORE_BUF_BYTES);
    if (!w->out_dir || !w->parent || !tmpl || !w->buf) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", out_dir);
        goto fail;
    }
    struct stat sb;
    if (stat(w->parent, &sb) != 0) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%s: parent directory %s %s", w->out_dir, w->parent,
                    errno == ENOENT ? "does not exist" : strerror(errno));
        goto fail;
    }
    if (!S_ISDIR(sb.st_mode)) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%s: %s is not a directory", w->out_dir, w->parent);
        goto fail;
    }
    int kind;
    uint64_t gen;
    /* Refuse a target that may not be replaced before taking the lock, so that a refusal
     * leaves nothing behind, not even a lock file beside a stranger's directory. */
    if ((s = classify_target(w->out_dir, &kind, &gen, err)) != CHIMERA_OK) goto fail;
    if (!w->opts.lock &&
        (s = ix_store_lock_acquire(w->out_dir, w->opts.lock_timeout_ms, &lock, err)) != CHIMERA_OK)
        goto fail;
    if ((s = classify_target(w->out_dir, &kind, &gen, err)) != CHIMERA_OK) goto fail;
    ix_store_clean_stale(w->out_dir, kind == TARGET_INDEX);
    /* Created and claimed under the lock: a clean-up that holds the lock never sees this
     * directory unclaimed. */
    if (!mkdtemp(tmpl)) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot create a temporary directory in %s: %s",
                    w->out_dir, w->parent, strerror(errno));
        goto fail;
    }
    w->tmp_dir = tmpl;
    tmpl = NULL;
    chmod(w->tmp_dir, 0755); /* mkdtemp makes it 0700; an index is as readable as a file */
    if ((w->tmp_fd = ix_store_tmpdir_claim(w->tmp_dir)) < 0) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot lock %s: %s", w->out_dir, w->tmp_dir,
                    strerror(errno));
        goto fail;
    }
    ix_store_lock_release(lock);
    *out = w;
    return CHIMERA_OK;
fail:
    cm_free(tmpl);
    ix_store_writer_abort(w);
    ix_store_lock_release(lock);
    return s;
}

/* ---- sections -------------------------------------------------------------------------- */

/* Fails the writer for good (an error in the middle of a section leaves it unusable):
 * records the message, copies it to err and returns code. */
static chimera_status writer_fail(ix_store_writer *w, chimera_status code, chimera_error *err,
                                  const char *fmt, ...) CM_PRINTF(4, 5);
static chimera_status writer_fail(ix_store_writer *w, chimera_status code, chimera_error *err,
                                  const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    w->failed.code = code;
    vsnprintf(w->failed.msg, sizeof w->failed.msg, fmt, ap);
    va_end(ap);
    if (err) *err = w->failed;
    return code;
}

static chimera_status sticky(const ix_store_writer *w, chimera_error *err)
{
    if (err) *err = w->failed;
    return w->failed.code;
}

static int name_taken(const ix_store_writer *w, const char *name)
{
    for (uint32_t i = 0; i < w->n_secs; i++)
        if (strcmp(w->secs[i].name, name) == 0) return 1;
    return 0;
}

/* Product of the shape times the element size, or -1 on overflow past 2^53. */
static int type_bytes(const char *dtype, uint32_t ndim, const uint64_t *shape, uint64_t *out)
{
    uint64_t total = ix_fmt_dtype_size(dtype);
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] != 0 && total > (uint64_t)FMT_MAX_JSON_INT / shape[i]) return -1;
        total *= shape[i];
    }
    *out = total;
    return 0;
}

chimera_status ix_store_section_begin(ix_store_writer *w, const char *name,
                                      const ix_store_type *type, chimera_error *err)
{
    if (w->failed.code != CHIMERA_OK) return sticky(w, err);
    if (w->fd >= 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: section '%s' is still open",
                       w->out_dir, w->cur.name);
    if (!ix_fmt_name_valid(name))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s: invalid section name '%.40s' (1..%d of [A-Za-z0-9_-], starting "
                       "with a letter or digit)", w->out_dir, name ? name : "(null)",
                       FMT_NAME_MAX);
    if (name_taken(w, name))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: section '%s' written twice",
                       w->out_dir, name);
    for (uint32_t j = 0; j < w->n_keep; j++) /* an in-place writer's live sections */
        if (strcmp(w->keep[j].name, name) == 0)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "%s: section '%s' already exists in the index", w->out_dir, name);
    if (w->n_secs >= FMT_MAX_SECTIONS)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: more than %d sections", w->out_dir,
                       FMT_MAX_SECTIONS);
    memset(&w->cur, 0, sizeof w->cur);
    snprintf(w->cur.name, sizeof w->cur.name, "%s", name);
    if (type) {
        uint64_t tb;
        if (ix_fmt_dtype_size(type->dtype) == 0 || type->ndim < 1 || type->ndim > FMT_MAX_DIMS ||
            type_bytes(type->dtype, type->ndim, type->shape, &tb) != 0)
            return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                           "%s: section '%s': invalid type (dtype '%s', %u dimensions)",
                           w->out_dir, name, type->dtype ? type->dtype : "(null)", type->ndim);
        snprintf(w->cur.dtype, sizeof w->cur.dtype, "%s", type->dtype);
        w->cur.ndim = type->ndim;
        memcpy(w->cur.shape, type->shape, type->ndim * sizeof type->shape[0]);
    }
    char file[FMT_NAME_BYTES + sizeof FMT_SECTION_SUFFIX];
    snprintf(file, sizeof file, "%s%s", name, FMT_SECTION_SUFFIX);
    w->cur_path = cm_path_join(w->tmp_dir, file);
    if (!w->cur_path)
        return writer_fail(w, CHIMERA_ERR_NOMEM, err, "%s: section '%s': out of memory",
                           w->out_dir, name);
    w->fd = open(w->cur_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        /* not ours (EEXIST: a file of that name was there): the abort must not unlink it */
        int e = errno;
        chimera_status s = writer_fail(w, CHIMERA_ERR_IO, err, "%s: cannot create: %s",
                                       w->cur_path, strerror(e));
        cm_free(w->cur_path);
        w->cur_path = NULL;
        return s;
    }
    XXH3_64bits_reset(&w->hash);
    memset(w->buf, 0, FMT_HEADER_BYTES); /* placeholder header, rewritten at the end */
    w->buf_used = FMT_HEADER_BYTES;
    return CHIMERA_OK;
}

static chimera_status flush_buf(ix_store_writer *w, chimera_error *err)
{
    int e = write_all(w->fd, w->buf, w->buf_used);
    w->buf_used = 0;
    if (e) return writer_fail(w, CHIMERA_ERR_IO, err, "%s: write failed: %s", w->cur_path,
                              strerror(e));
    return CHIMERA_OK;
}

chimera_status ix_store_section_write(ix_store_writer *w, const void *data, size_t bytes,
                                      chimera_error *err)
{
    if (w->failed.code != CHIMERA_OK) return sticky(w, err);
    if (w->fd < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: no section is open", w->out_dir);
    if (bytes == 0) return CHIMERA_OK;
    if (bytes > (uint64_t)FMT_MAX_JSON_INT - w->cur.bytes)
        return writer_fail(w, CHIMERA_ERR_INVALID_ARG, err, "%s: section '%s' exceeds 2^53 bytes",
                           w->out_dir, w->cur.name);
    XXH3_64bits_update(&w->hash, data, bytes);
    w->cur.bytes += bytes;
    if (w->buf_used + bytes <= STORE_BUF_BYTES) {
        memcpy(w->buf + w->buf_used, data, bytes);
        w->buf_used += bytes;
        return CHIMERA_OK;
    }
    CM_TRY(flush_buf(w, err));
    if (bytes < STORE_BUF_BYTES) {
        memcpy(w->buf, data, bytes);
        w->buf_used = bytes;
        return CHIMERA_OK;
    }
    int e = write_all(w->fd, data, bytes);
    if (e) return writer_fail(w, CHIMERA_ERR_IO, err, "%s: write failed: %s", w->cur_path,
                              strerror(e));
    return CHIMERA_OK;
}

chimera_status ix_store_section_end(ix_store_writer *w, chimera_error *err)
{
    if (w->failed.code != CHIMERA_OK) return sticky(w, err);
    if (w->fd < 0)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: no section is open", w->out_dir);
    if (w->cur.dtype[0]) {
        uint64_t tb = 0;
        type_bytes(w->cur.dtype, w->cur.ndim, w->cur.shape, &tb);
        if (tb != w->cur.bytes) {
            return writer_fail(w, CHIMERA_ERR_INVALID_ARG, err,
                               "%s: section '%s': %llu bytes written, its type says %llu",
                               w->out_dir, w->cur.name, (unsigned long long)w->cur.bytes,
                               (unsigned long long)tb);
        }
    }
    if (w->buf_used) CM_TRY(flush_buf(w, err));
    w->cur.xxh3 = XXH3_64bits_digest(&w->hash);
    uint8_t hdr[FMT_HEADER_BYTES];
    ix_fmt_header_encode(hdr, w->cur.name, w->major, w->minor, w->cur.bytes, w->cur.xxh3);
    int e = pwrite_all(w->fd, hdr, sizeof hdr, 0);
    if (!e && !w->opts.no_sync && fsync(w->fd) != 0) e = errno;
    if (close(w->fd) != 0 && !e) e = errno;
    w->fd = -1;
    if (e) return writer_fail(w, CHIMERA_ERR_IO, err, "%s: cannot write: %s", w->cur_path,
                              strerror(e));
    if (w->n_secs == w->cap_secs) {
        uint32_t cap = w->cap_secs ? 2 * w->cap_secs : 16;
        wsection *g = cm_realloc(w->secs, cap * sizeof *g);
        if (!g) return writer_fail(w, CHIMERA_ERR_NOMEM, err, "%s: section '%s': out of memory",
                                   w->out_dir, w->cur.name);
        w->secs = g;
        w->cap_secs = cap;
    }
    w->secs[w->n_secs++] = w->cur;
    cm_free(w->cur_path);
    w->cur_path = NULL;
    return CHIMERA_OK;
}

chimera_status ix_store_writer_add_typed(ix_store_writer *w, const char *name,
                                         const ix_store_type *type, const void *data,
                                         uint64_t bytes, chimera_error *err)
{
    CM_TRY(ix_store_section_begin(w, name, type, err));
    if (bytes > SIZE_MAX)
        return writer_fail(w, CHIMERA_ERR_INVALID_ARG, err, "%s: section '%s' is too large",
                           w->out_dir, name);
    CM_TRY(ix_store_section_write(w, data, (size_t)bytes, err));
    return ix_store_section_end(w, err);
}

chimera_status ix_store_writer_add(ix_store_writer *w, const char *name, const void *data,
                                   uint64_t bytes, chimera_error *err)
{
    return ix_store_writer_add_typed(w, name, NULL, data, bytes, err);
}

/* ---- commit ------------------------------------------------------------------------------ */

/* The manifest tree (format.h), canonicalised: it is printed and parsed back once so that
 * what is hashed is exactly what a reader will re-print from the file (a cJSON raw item
 * in the caller's meta, for instance, becomes ordinary JSON first). */
static chimera_status build_manifest(const ix_store_writer *w, const cJSON *meta, uint64_t gen,
                                     cJSON **out, chimera_error *err)
{
    *out = NULL;
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "magic", FMT_MANIFEST_MAGIC);
    ok = ok && cJSON_AddNumberToObject(root, "format_major", w->major);
    ok = ok && cJSON_AddNumberToObject(root, "format_minor", w->minor);
    ok = ok && cJSON_AddStringToObject(root, "library_version", CHIMERA_VERSION_STRING);
    ok = ok && cJSON_AddStringToObject(root, "endian", "little");
    ok = ok && cJSON_AddNumberToObject(root, "generation", (double)gen);
    if (ok) {
        cJSON *m = meta ? cJSON_Duplicate(meta, 1) : cJSON_CreateObject();
        ok = m && cJSON_AddItemToObject(root, "meta", m);
        if (m && !ok) cJSON_Delete(m);
    }
    cJSON *arr = ok ? cJSON_AddArrayToObject(root, "sections") : NULL;
    ok = arr != NULL;
    for (uint32_t i = 0; ok && i < w->n_keep + w->n_secs; i++) {
        const wsection *s = i < w->n_keep ? &w->keep[i] : &w->secs[i - w->n_keep];
        if (!s->name[0]) continue; /* a kept section the commit drops */
        char file[FMT_NAME_BYTES + sizeof FMT_SECTION_SUFFIX], hex[17];
        snprintf(file, sizeof file, "%s%s", s->name, FMT_SECTION_SUFFIX);
        ix_fmt_hex_format(hex, s->xxh3);
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(arr, o);
        if (o && !ok) cJSON_Delete(o);
        ok = ok && cJSON_AddStringToObject(o, "name", s->name);
        ok = ok && cJSON_AddStringToObject(o, "file", file);
        ok = ok && cJSON_AddNumberToObject(o, "offset", FMT_HEADER_BYTES);
        ok = ok && cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
        ok = ok && cJSON_AddStringToObject(o, "xxh3", hex);
        if (ok && s->dtype[0]) {
            ok = cJSON_AddStringToObject(o, "dtype", s->dtype) != NULL;
            cJSON *shape = ok ? cJSON_AddArrayToObject(o, "shape") : NULL;
            ok = shape != NULL;
            for (uint32_t d = 0; ok && d < s->ndim; d++) {
                cJSON *v = cJSON_CreateNumber((double)s->shape[d]);
                ok = v && cJSON_AddItemToArray(shape, v);
                if (v && !ok) cJSON_Delete(v);
            }
        }
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    cJSON *canon = text ? cJSON_Parse(text) : NULL;
    cJSON_free(text);
    uint64_t digest;
    char hex[17];
    ok = canon && ix_store_manifest_digest(canon, &digest) == 0;
    if (ok) ix_fmt_hex_format(hex, digest);
    ok = ok && cJSON_AddStringToObject(canon, "manifest_xxh3", hex);
    if (!ok) {
        cJSON_Delete(canon);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory building the manifest",
                       w->out_dir);
    }
    *out = canon;
    return CHIMERA_OK;
}

static chimera_status write_manifest(const ix_store_writer *w, const cJSON *root,
                                     chimera_error *err)
{
    char *text = cJSON_Print(root);
    if (!text)
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory printing the manifest",
                       w->out_dir);
    char *path = cm_path_join(w->tmp_dir, FMT_MANIFEST_NAME);
    if (!path) {
        cJSON_free(text);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", w->out_dir);
    }
    cm_writer mw;
    chimera_status s = cm_writer_open(&mw, path, err);
    if (s == CHIMERA_OK) {
        s = cm_writer_write(&mw, text, strlen(text), err);
        if (s == CHIMERA_OK) s = cm_writer_write(&mw, "\n", 1, err);
        if (s == CHIMERA_OK) s = cm_writer_commit(&mw, err); /* fsyncs file and tmp dir */
        else cm_writer_abort(&mw);
    }
    cm_free(path);
    cJSON_free(text);
    return s;
}

static int exchange_unsupported(int e)
{
    return e == EINVAL || e == ENOSYS || e == ENOTSUP || e == EOPNOTSUPP;
}

/* Puts tmp_dir in place of out_dir (see the top of the file). On success the old index,
 * if any, has been deleted (best effort: a failure to delete it leaves a directory
 * beside the new index, and the commit still succeeds, because the commit point has
 * passed). On failure out_dir is as it was, or, if even undoing failed, the message
 * says where the old index is. */
static chimera_status swap_into_place(ix_store_writer *w, int kind, chimera_error *err)
{
    if (kind == TARGET_ABSENT) {
        if (rename(w->tmp_dir, w->out_dir) != 0)
            return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot rename %s into place: %s",
                           w->out_dir, w->tmp_dir, strerror(errno));
        return CHIMERA_OK;
    }
    if (!w->opts.no_exchange) {
        if (renameat2(AT_FDCWD, w->tmp_dir, AT_FDCWD, w->out_dir, RENAME_EXCHANGE) == 0) {
            if (!w->opts.no_sync) cm_fsync_dir(w->parent, NULL);
            remove_tree(w->tmp_dir); /* the old index, now under the temporary name */
            return CHIMERA_OK;
        }
        if (!exchange_unsupported(errno))
            return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot exchange with %s: %s", w->out_dir,
                           w->tmp_dir, strerror(errno));
    }
    /* Fallback: rename aside, rename in, delete aside. The aside name is reserved with
     * mkdtemp (an empty directory), which rename() may replace. */
    char *aside = concat(w->out_dir, ".old-XXXXXX");
    if (!aside) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", w->out_dir);
    chimera_status s = CHIMERA_OK;
    if (!mkdtemp(aside)) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot create a side directory: %s", w->out_dir,
                    strerror(errno));
    } else if (rename(w->out_dir, aside) != 0) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot move the old index aside: %s",
                    w->out_dir, strerror(errno));
        rmdir(aside);
    } else if (rename(w->tmp_dir, w->out_dir) != 0) {
        int e = errno;
        if (rename(aside, w->out_dir) == 0)
            s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot rename %s into place: %s", w->out_dir,
                        w->tmp_dir, strerror(e));
        else
            s = cm_fail(err, CHIMERA_ERR_IO,
                        "%s: cannot rename the new index into place (%s) nor restore the old "
                        "one, which is now at %s", w->out_dir, strerror(e), aside);
    } else {
        if (!w->opts.no_sync) cm_fsync_dir(w->parent, NULL);
        remove_tree(aside);
    }
    cm_free(aside);
    return s;
}

chimera_status ix_store_writer_preview(ix_store_writer *w, const cJSON *meta, const char **dir,
                                       chimera_error *err)
{
    *dir = NULL;
    if (w->failed.code != CHIMERA_OK) return sticky(w, err);
    if (w->fd >= 0 || w->in_place || (meta && !cJSON_IsObject(meta)))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                       "%s: preview with a section open, in place, or without a meta object",
                       w->out_dir);
    cJSON *root = NULL;
    CM_TRY(build_manifest(w, meta, 0, &root, err));
    chimera_status s = write_manifest(w, root, err);
    cJSON_Delete(root);
    if (s == CHIMERA_OK) *dir = w->tmp_dir;
    return s;
}

chimera_status ix_store_writer_commit(ix_store_writer *w, const cJSON *meta, chimera_error *err)
{
    chimera_status s;
    cJSON *root = NULL;
    ix_store_lock *lock = NULL;
    if (w->failed.code != CHIMERA_OK) {
        s = sticky(w, err);
        goto fail;
    }
    if (w->fd >= 0) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: section '%s' is still open at commit",
                    w->out_dir, w->cur.name);
        goto fail;
    }
    if (meta && !cJSON_IsObject(meta)) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: meta must be a JSON object", w->out_dir);
        goto fail;
    }
    /* From here to the swap under the writer lock: the generation read from the target
     * is the one the new index succeeds, and nothing can change the target in between
     * (before, a tune's manifest update racing this swap could land in the new index
     * with the old index's sections listed, which made it unreadable). */
    if (w->in_place) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: an in-place writer commits with "
                    "ix_store_delta_commit", w->out_dir);
        goto fail;
    }
    if (!w->opts.lock &&
        (s = ix_store_lock_acquire(w->out_dir, w->opts.lock_timeout_ms, &lock, err)) != CHIMERA_OK)
        goto fail;
    int kind;
    uint64_t gen;
    if ((s = classify_target(w->out_dir, &kind, &gen, err)) != CHIMERA_OK) goto fail;
    if (w->opts.check_generation && gen != w->opts.expect_generation) {
        s = cm_fail(err, CHIMERA_ERR_CONFLICT,
                    "%s changed while this writer worked (generation %llu, expected %llu); "
                    "nothing was replaced", w->out_dir, (unsigned long long)gen,
                    (unsigned long long)w->opts.expect_generation);
        goto fail;
    }
    /* a generation at the top of the exact range (only a forged manifest has one)
     * restarts the count rather than writing a number readers refuse */
    uint64_t next = gen < (uint64_t)FMT_MAX_JSON_INT ? gen + 1 : 1;
    if ((s = build_manifest(w, meta, next, &root, err)) != CHIMERA_OK) goto fail;
    if ((s = write_manifest(w, root, err)) != CHIMERA_OK) goto fail;
    cJSON_Delete(root);
    root = NULL;
    if ((s = swap_into_place(w, kind, err)) != CHIMERA_OK) goto fail;
    /* Past the commit point: tmp_dir names nothing of ours any more (it was renamed into
     * place, or it held the old index and was deleted), so it must not be removed. */
    cm_free(w->tmp_dir);
    w->tmp_dir = NULL;
    /* out_dir is an index now, so every leftover beside it is obsolete (even the copies
     * an interrupted replace left while it was missing) */
    ix_store_clean_stale(w->out_dir, 1);
    /* The rename made durable before the lock goes, so that no later writer works on an
     * index a crash could still put back under its temporary name. A failed sync means
     * the index is in place but its rename may not be durable; it is reported, and the
     * new index is left as it is. */
    if (!w->opts.no_sync) s = cm_fsync_dir(w->parent, err);
    ix_store_lock_release(lock); /* NULL when the caller holds it (opts.lock) */
    writer_free(w);
    return s;
fail:
    cJSON_Delete(root);
    ix_store_writer_abort(w);
    ix_store_lock_release(lock);
    return s;
}

/* ---- in place: a change committed into the index directory ---------------------------- */

chimera_status ix_store_delta_begin(const char *dir, const store *current, ix_store_lock *lock,
                                    const ix_store_write_opts *opts, ix_store_writer **out,
                                    chimera_error *err)
{
    *out = NULL;
    if (!lock)
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: an in-place change needs the writer lock",
                       dir);
    if (!ix_fmt_host_little_endian())
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "%s: the index format is little-endian; this host is not", dir);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    ix_store_writer *w = cm_aligned_alloc(64, sizeof *w);
    if (!w) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->tmp_fd = -1;
    if (opts) w->opts = *opts;
    w->opts.lock = lock;
    w->in_place = 1;
    w->major = FMT_LIVING_MAJOR;
    w->minor = FMT_LIVING_MINOR;
    w->base_gen = ix_store_generation(current);
    w->out_dir = cm_malloc(n + 1);
    if (w->out_dir) {
        memcpy(w->out_dir, dir, n);
        w->out_dir[n] = '\0';
        w->parent = cm_path_dir(w->out_dir);
        w->tmp_dir = concat(w->out_dir, "");
    }
    w->buf = cm_malloc(STORE_BUF_BYTES);
    w->n_keep = ix_store_n_sections(current);
    w->keep = cm_calloc(w->n_keep ? w->n_keep : 1, sizeof *w->keep);
    if (!w->out_dir || !w->parent || !w->tmp_dir || !w->buf || !w->keep) {
        writer_free(w);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    }
    for (uint32_t i = 0; i < w->n_keep; i++) {
        const ix_store_section_desc *d = ix_store_section_at(current, i);
        wsection *k = &w->keep[i];
        snprintf(k->name, sizeof k->name, "%s", d->name);
        k->bytes = d->bytes;
        k->xxh3 = d->xxh3;
        if (d->dtype) snprintf(k->dtype, sizeof k->dtype, "%s", d->dtype);
        k->ndim = d->ndim;
        memcpy(k->shape, d->shape, sizeof k->shape);
    }
    /* section files a killed in-place writer left (listed nowhere) */
    ix_store_clean_stale(w->out_dir, 1);
    *out = w;
    return CHIMERA_OK;
}

chimera_status ix_store_delta_commit(ix_store_writer *w, const cJSON *meta,
                                     const char *const *drop, uint32_t n_drop, chimera_error *err)
{
    chimera_status s;
    cJSON *root = NULL;
    char *text = NULL, *path = NULL;
    if (w->failed.code != CHIMERA_OK) {
        s = sticky(w, err);
        goto fail;
    }
    if (!w->in_place || w->fd >= 0 || !cJSON_IsObject(meta)) {
        s = cm_fail(err, CHIMERA_ERR_INVALID_ARG,
                    "%s: delta commit without an in-place writer, with a section open, or "
                    "without a meta object", w->out_dir);
        goto fail;
    }
    for (uint32_t i = 0; i < n_drop; i++)
        for (uint32_t j = 0; j < w->n_keep; j++)
            if (strcmp(w->keep[j].name, drop[i]) == 0) w->keep[j].name[0] = '\0';
    /* a manifest readers would refuse (store_read.c) is never committed */
    uint64_t n_listed = w->n_secs;
    for (uint32_t j = 0; j < w->n_keep; j++) n_listed += w->keep[j].name[0] != '\0';
    if (n_listed > FMT_MAX_SECTIONS) {
        s = cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                    "%s: the change would leave %llu sections, more than the format's %d; "
                    "compacting the index (chimera compact) merges them", w->out_dir,
                    (unsigned long long)n_listed, FMT_MAX_SECTIONS);
        goto fail;
    }
    uint64_t next = w->base_gen < (uint64_t)FMT_MAX_JSON_INT ? w->base_gen + 1 : 1;
    if ((s = build_manifest(w, meta, next, &root, err)) != CHIMERA_OK) goto fail;
    /* the commit point: the new manifest renamed over the old one (cm_writer: temporary
     * file, fsync, rename, fsync of the directory). Section files were synced at their
     * end, so a manifest that lists them never names data that is not on disk. */
    text = cJSON_Print(root);
    path = cm_path_join(w->out_dir, FMT_MANIFEST_NAME);
    if (!text || !path) {
        s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory writing the manifest", w->out_dir);
        goto fail;
    }
    /* the new sections' directory entries durable before a manifest names them */
    if (!w->opts.no_sync && (s = cm_fsync_dir(w->out_dir, err)) != CHIMERA_OK) goto fail;
    cm_writer mw;
    s = cm_writer_open(&mw, path, err);
    if (s == CHIMERA_OK) {
        s = cm_writer_write(&mw, text, strlen(text), err);
        if (s == CHIMERA_OK) s = cm_writer_write(&mw, "\n", 1, err);
        if (s == CHIMERA_OK) s = cm_writer_commit(&mw, err);
        else cm_writer_abort(&mw);
    }
    /* A manifest in place is the commit, even when the directory's fsync after its
     * rename failed (EMFILE, EIO): readers already open it, so aborting now would delete
     * the sections it lists. The change stands, the sync is tried once more below. */
    if (s != CHIMERA_OK && !mw.published) goto fail;
    int resync = s != CHIMERA_OK;
    s = CHIMERA_OK;
    /* Past the commit point. Files no manifest lists any more go; readers that mapped
     * them keep their mappings (an unlinked file stays mapped), and an open that
     * started before the commit finds them gone and retries (store_read.c). A failure
     * to delete leaves a file the next writer's clean-up removes. */
    for (uint32_t i = 0; i < n_drop; i++) {
        char file[FMT_NAME_BYTES + sizeof FMT_SECTION_SUFFIX];
        snprintf(file, sizeof file, "%s%s", drop[i], FMT_SECTION_SUFFIX);
        char *p = cm_path_join(w->out_dir, file);
        if (p) unlink(p);
        cm_free(p);
    }
    if ((n_drop || resync) && !w->opts.no_sync) cm_fsync_dir(w->out_dir, NULL);
    cJSON_Delete(root);
    cJSON_free(text);
    cm_free(path);
    writer_free(w);
    return CHIMERA_OK;
fail:
    cJSON_Delete(root);
    cJSON_free(text);
    cm_free(path);
    ix_store_writer_abort(w);
    return s;
}

chimera_status ix_store_writer_copy_file(ix_store_writer *w, const char *name, const char *src,
                                         chimera_error *err)
{
    if (w->failed.code != CHIMERA_OK) return sticky(w, err);
    if (!ix_store_is_side_file(name))
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "%s: '%s' is not a file an index may hold",
                       w->out_dir, name);
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
        if (errno == ENOENT) return CHIMERA_OK; /* nothing to carry over */
        return writer_fail(w, CHIMERA_ERR_IO, err, "%s: cannot open: %s", src, strerror(errno));
    }
    char *dst = cm_path_join(w->tmp_dir, name);
    int out = dst ? open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644) : -1;
    int e = dst ? (out < 0 ? errno : 0) : ENOMEM;
    while (!e) {
        ssize_t r = read(in, w->buf, STORE_BUF_BYTES);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) e = errno;
        if (r <= 0) break;
        e = write_all(out, w->buf, (size_t)r);
    }
    if (!e && !w->opts.no_sync && fsync(out) != 0) e = errno;
    if (out >= 0 && close(out) != 0 && !e) e = errno;
    close(in);
    chimera_status s = CHIMERA_OK;
    if (e) s = writer_fail(w, CHIMERA_ERR_IO, err, "%s: cannot copy %s: %s", w->out_dir, src,
                           strerror(e));
    cm_free(dst);
    return s;
}
