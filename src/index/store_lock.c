/* The writer lock of an index and the clean-up of what killed writers leave (store.h).
 *
 * Where the lock lives. An index directory is replaced whole (store_write.c swaps a new
 * directory in with RENAME_EXCHANGE), so a lock inside it would be swapped away with it
 * and two writers could hold "the" lock of two different directories. The lock is the
 * file "<IDX>.lock" beside the index, in the parent directory, which every writer
 * already needs to be writable. It is never deleted: a process that has opened the file
 * but not yet locked it would lock an unlinked inode while a third created a new file
 * and locked that, and both would believe they hold the lock.
 *
 * Why flock(2). The kernel drops the lock when the last descriptor of its open file
 * description is closed, which includes the holder's death by SIGKILL, so a dead writer
 * never needs its lock broken by hand, and no lease or heartbeat is needed. It belongs
 * to the open file, not the process: two threads, or two writers in one process, each
 * with its own open(), exclude each other. POSIX fcntl record locks were rejected for
 * that reason (a second open() in the same process shares them, and closing any
 * descriptor of the file drops them); OFD fcntl locks would work as flock does but buy
 * nothing here. On NFS, Linux implements flock with byte-range locks, so it still works
 * across clients.
 *
 * Waiting. flock has no timeout, so the acquirer polls with LOCK_NB and sleeps between
 * tries, 1 ms doubling to 50 ms (a short hold is noticed quickly, a long one costs few
 * wake-ups), until its deadline. A holder writes its process id into the lock file so
 * that a waiter that gives up can say who holds it. The id is informative only: it is
 * written after locking and cleared before unlocking, so for a moment it may be
 * missing (the message then names no process), and after a crash it names a dead
 * process until the next holder overwrites it.
 *
 * Leftovers. A killed writer leaves: a build, "<IDX>.tmp-XXXXXX" (unfinished, or
 * complete but never swapped in, or the previous index it was deleting after the swap);
 * the rename-aside fallback, "<IDX>.old-XXXXXX"; a meta update, "manifest.json.tmp-XXXXXX"
 * inside the index. The next writer removes them once it holds the lock (see
 * ix_store_clean_stale in store_impl.h for exactly what and when). The one subtle case is
 * a build's temporary directory, which exists for the whole build while the lock is held
 * only at its begin and commit: each build keeps an flock on its own directory
 * (ix_store_tmpdir_claim), taken under the index lock right after mkdtemp, so a cleaner
 * that holds the index lock and can flock a temporary directory knows its build is
 * gone. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fileio.h"
#include "index/format.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

#define LOCK_SUFFIX ".lock"
#define NAP_FIRST_US 1000
#define NAP_MAX_US 50000

struct ix_store_lock {
    int fd;
    int held;   /* the flock is ours (a failed acquire must not clear the holder's id) */
    char *path; /* "<dir>.lock" */
};

/* ---- the lock ------------------------------------------------------------------------ */

/* The holder's process id as recorded in the lock file; 0 when there is none. */
static long read_holder(int fd)
{
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return end != buf && pid > 0 ? pid : 0;
}

static void nap(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* "<index>.lock" for the index's own path: symbolic links resolved (realpath), so that
 * writers reaching one index by different names (a link to it, "idx/.") take one lock.
 * An index not there yet (a first build, or one between the renames of a replace) keeps
 * the name it was given; a link to a missing index is refused (*e), since the name it
 * would lock is not the one its target will have. NULL without *e: out of memory. */
static char *lock_name(const char *dir, size_t n, int *e)
{
    *e = 0;
    char *given = cm_malloc(n + 1);
    if (!given) return NULL;
    memcpy(given, dir, n);
    given[n] = '\0';
    char real[PATH_MAX];
    int resolved = realpath(given, real) != NULL;
    int why = errno;
    struct stat sb;
    if (!resolved && lstat(given, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        *e = why ? why : ENOENT;
        cm_free(given);
        return NULL;
    }
    const char *base = resolved ? real : given;
    size_t m = strlen(base);
    char *path = cm_malloc(m + sizeof LOCK_SUFFIX);
    if (path) {
        memcpy(path, base, m);
        memcpy(path + m, LOCK_SUFFIX, sizeof LOCK_SUFFIX);
    }
    cm_free(given);
    return path;
}

int ix_store_lock_file_exists(const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    int e;
    char *path = lock_name(dir, n, &e);
    struct stat sb;
    int yes = path && lstat(path, &sb) == 0;
    cm_free(path);
    return yes;
}

chimera_status ix_store_lock_acquire(const char *dir, int timeout_ms, ix_store_lock **out,
                                     chimera_error *err)
{
    *out = NULL;
    if (!dir || !dir[0]) return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "index path is empty");
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    if (n == 1 && dir[0] == '/')
        return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "/ cannot be an index");
    ix_store_lock *l = cm_calloc(1, sizeof *l);
    if (!l) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    l->fd = -1;
    int e;
    l->path = lock_name(dir, n, &e);
    if (!l->path) {
        ix_store_lock_release(l);
        if (e)
            return cm_fail(err, CHIMERA_ERR_IO, "%.*s: a symbolic link to an index that cannot "
                           "be reached: %s", (int)n, dir, strerror(e));
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", dir);
    }
    chimera_status s = CHIMERA_OK;
    /* O_NOFOLLOW: a symbolic link planted at the lock's name is refused, not followed */
    l->fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (l->fd < 0) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%.*s: cannot open its lock file %s: %s", (int)n, dir,
                    l->path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(l->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%.*s: its lock file %s is not a regular file", (int)n,
                    dir, l->path);
        goto fail;
    }
    double wait = timeout_ms == 0 ? STORE_LOCK_WAIT_MS / 1e3 : timeout_ms < 0 ? 0 : timeout_ms / 1e3;
    double t0 = cm_now();
    long us = NAP_FIRST_US;
    for (;;) {
        if (flock(l->fd, LOCK_EX | LOCK_NB) == 0) break;
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) {
            s = cm_fail(err, CHIMERA_ERR_IO, "%.*s: cannot lock %s: %s", (int)n, dir, l->path,
                        strerror(errno));
            goto fail;
        }
        double left = wait - (cm_now() - t0);
        if (left <= 0) {
            long pid = read_holder(l->fd);
            char who[40] = "";
            if (pid > 0) snprintf(who, sizeof who, " (pid %ld)", pid);
            s = cm_fail(err, CHIMERA_ERR_BUSY,
                        "index %.*s is being changed by another process%s; gave up after "
                        "%.3g s waiting for its lock %s", (int)n, dir, who, wait, l->path);
            goto fail;
        }
        nap(left * 1e6 < (double)us ? (long)(left * 1e6) + 1 : us);
        us = us * 2 < NAP_MAX_US ? us * 2 : NAP_MAX_US;
    }
    l->held = 1;
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, buf, (size_t)len, 0) != len) {
        /* the id only serves other waiters' messages; the lock itself is held */
    }
    *out = l;
    return CHIMERA_OK;
fail:
    ix_store_lock_release(l);
    return s;
}

void ix_store_lock_release(ix_store_lock *l)
{
    if (!l) return;
    if (l->fd >= 0) {
        if (l->held && ftruncate(l->fd, 0) != 0) {
            /* a stale id in the file only makes another waiter's message less exact */
        }
        close(l->fd); /* drops the flock */
    }
    cm_free(l->path);
    cm_free(l);
}

/* ---- leftovers ------------------------------------------------------------------------- */

/* 1 when s is exactly 6 characters of mkstemp/mkdtemp's alphabet ([A-Za-z0-9]). */
static int temp_suffix(const char *s)
{
    for (int i = 0; i < 6; i++)
        if (!isalnum((unsigned char)s[i])) return 0;
    return s[6] == '\0';
}

int ix_store_is_side_file(const char *name)
{
    return strcmp(name, "meta.sqlite") == 0 || strcmp(name, "meta.sqlite-journal") == 0;
}

int ix_store_is_manifest_tmp(const char *name)
{
    static const char pre[] = FMT_MANIFEST_NAME ".tmp-";
    return strncmp(name, pre, sizeof pre - 1) == 0 && temp_suffix(name + sizeof pre - 1);
}

/* 1 when name is "<base><tag>XXXXXX", tag being ".tmp-" or ".old-". */
static int side_name(const char *name, const char *base, size_t blen, const char *tag)
{
    return strncmp(name, base, blen) == 0 && strncmp(name + blen, tag, 5) == 0 &&
           temp_suffix(name + blen + 5);
}

static int has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n > k && strcmp(s + n - k, suffix) == 0;
}

int ix_store_tmpdir_claim(const char *tmp_dir)
{
    int fd = open(tmp_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Removes, inside the directory `dfd` (consumed), the files an index writer writes;
 * 1 when that left it empty. */
static int empty_ours(int dfd)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    int left = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
        struct stat sb;
        int ours = fstatat(dirfd(d), nm, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
                   (strcmp(nm, FMT_MANIFEST_NAME) == 0 || ix_store_is_manifest_tmp(nm) ||
                    has_suffix(nm, FMT_SECTION_SUFFIX) || ix_store_is_side_file(nm));
        if (!ours || unlinkat(dirfd(d), nm, 0) != 0) left = 1;
    }
    closedir(d); /* also drops an flock taken on it */
    return !left;
}

/* 1 when `name` is "<section>.bin" for a valid section name that the manifest's
 * "sections" array does not list. */
static int unlisted_section_file(const cJSON *secs, const char *name)
{
    size_t n = strlen(name), sl = strlen(FMT_SECTION_SUFFIX);
    if (n <= sl || n - sl > FMT_NAME_MAX || strcmp(name + n - sl, FMT_SECTION_SUFFIX) != 0)
        return 0;
    char sec[FMT_NAME_BYTES];
    memcpy(sec, name, n - sl);
    sec[n - sl] = '\0';
    if (!ix_fmt_name_valid(sec)) return 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, secs)
    {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, sec) == 0) return 0;
    }
    return 1;
}

int ix_store_clean_stale(const char *dir, int dir_is_index)
{
    char *parent = cm_path_dir(dir);
    if (!parent) return 0;
    const char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    size_t blen = strlen(base);
    int removed = 0;
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cm_free(parent);
    if (pfd < 0) return 0;

    /* inside the index: manifest temporaries of killed meta updates, and section files
     * of killed in-place writers (ix_store_delta_begin), which no manifest lists */
    if (dir_is_index) {
        int ifd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d = ifd >= 0 ? fdopendir(ifd) : NULL;
        if (!d && ifd >= 0) close(ifd);
        cJSON *man = NULL;
        if (d && ix_store_manifest_loadat(dirfd(d), FMT_MANIFEST_NAME, FMT_MANIFEST_NAME, &man,
                                          NULL, NULL) != CHIMERA_OK)
            man = NULL; /* unreadable: leave every section file alone */
        const cJSON *secs = man ? cJSON_GetObjectItemCaseSensitive(man, "sections") : NULL;
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            struct stat sb;
            int stale = ix_store_is_manifest_tmp(e->d_name);
            if (!stale && cJSON_IsArray(secs) && unlisted_section_file(secs, e->d_name)) stale = 1;
            if (stale && fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(sb.st_mode) && unlinkat(dirfd(d), e->d_name, 0) == 0)
                removed++;
        }
        cJSON_Delete(man);
        if (d) closedir(d);
    }

    /* beside it: temporary and side directories. The names are collected first, since
     * removing entries while readdir walks the same directory may skip some. */
    int dup_fd = dup(pfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d && dup_fd >= 0) close(dup_fd);
    char (*names)[256] = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        int is_tmp = side_name(nm, base, blen, ".tmp-");
        int is_old = dir_is_index && side_name(nm, base, blen, ".old-");
        if ((!is_tmp && !is_old) || strlen(nm) >= sizeof names[0]) continue;
        if (n == cap) {
            int nc = cap ? 2 * cap : 8;
            char (*g)[256] = cm_realloc(names, (size_t)nc * sizeof *names);
            if (!g) break;
            names = g;
            cap = nc;
        }
        snprintf(names[n++], sizeof names[0], "%s", nm);
    }
    if (d) closedir(d);
    for (int i = 0; i < n; i++) {
        const char *nm = names[i];
        int sfd = openat(pfd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0) continue;
        /* a build still running holds an flock on its directory (ix_store_tmpdir_claim);
         * .old- directories are never claimed, and the lock holder is the only writer
         * that makes them */
        if (flock(sfd, LOCK_EX | LOCK_NB) != 0) {
            close(sfd);
            continue;
        }
        struct stat sb;
        if (!dir_is_index && fstatat(sfd, FMT_MANIFEST_NAME, &sb, AT_SYMLINK_NOFOLLOW) == 0) {
            close(sfd); /* a complete index, maybe the only one: ix_store_open names it */
            continue;
        }
        if (empty_ours(sfd) && unlinkat(pfd, nm, AT_REMOVEDIR) == 0) removed++;
    }
    cm_free(names);
    close(pfd);
    return removed;
}
