/* Crash-safe writes (see fileio.h): LMDB's order — data, sync, then the commit point. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "core/alloc.h"

char *cm_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = cm_malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t n = a;
    if (a > 0 && dir[a - 1] != '/') p[n++] = '/';
    memcpy(p + n, name, b + 1);
    return p;
}

char *cm_path_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return cm_strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = cm_malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = '\0';
    return d;
}

/* The target as it is now: a device, FIFO or socket is opened for writing in place
 * (w->direct); a directory is refused; a symbolic link resolves to the file it names. */
static chimera_status writer_target(cm_writer *w, const char *path, char **target,
                                    chimera_error *err)
{
    *target = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return CHIMERA_OK; /* absent (or a dangling link): create it */
    if (S_ISDIR(sb.st_mode))
        return cm_fail(err, CHIMERA_ERR_IO, "%s: is a directory, not an output file", path);
    if (!S_ISREG(sb.st_mode)) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        w->f = fdopen(fd, "wb");
        if (!w->f) {
            close(fd);
            return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open stream", path);
        }
        w->direct = 1;
        return CHIMERA_OK;
    }
    struct stat lb;
    if (lstat(path, &lb) == 0 && S_ISLNK(lb.st_mode)) {
        char real[PATH_MAX];
        if (!realpath(path, real))
            return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot resolve: %s", path, strerror(errno));
        *target = cm_strdup(real);
        if (!*target) return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    }
    return CHIMERA_OK;
}

chimera_status cm_writer_open(cm_writer *w, const char *path, chimera_error *err)
{
    memset(w, 0, sizeof *w);
    char *target;
    chimera_status s = writer_target(w, path, &target, err);
    w->final_path = target ? target : cm_strdup(path);
    if (s != CHIMERA_OK || !w->final_path) {
        cm_writer_abort(w);
        return s != CHIMERA_OK ? s : cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    }
    if (w->direct) return CHIMERA_OK;
    size_t n = strlen(w->final_path);
    w->tmp_path = cm_malloc(n + 16);
    if (!w->tmp_path) {
        cm_writer_abort(w);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(w->tmp_path, w->final_path, n);
    memcpy(w->tmp_path + n, ".tmp-XXXXXX", 12);
    int fd = mkstemp(w->tmp_path);
    if (fd < 0) {
        int e = errno;
        cm_free(w->tmp_path);
        w->tmp_path = NULL;
        cm_writer_abort(w);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    fchmod(fd, 0644);
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        close(fd);
        cm_writer_abort(w);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open stream", path);
    }
    return CHIMERA_OK;
}

chimera_status cm_writer_write(cm_writer *w, const void *data, size_t n, chimera_error *err)
{
    if (n == 0) return CHIMERA_OK;
    if (fwrite(data, 1, n, w->f) != n)
        return cm_fail(err, CHIMERA_ERR_IO, "%s: write failed: %s", w->final_path,
                       strerror(errno));
    w->written += n;
    return CHIMERA_OK;
}

chimera_status cm_writer_printf(cm_writer *w, chimera_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vfprintf(w->f, fmt, ap);
    va_end(ap);
    if (n < 0)
        return cm_fail(err, CHIMERA_ERR_IO, "%s: write failed: %s", w->final_path,
                       strerror(errno));
    w->written += (uint64_t)n;
    return CHIMERA_OK;
}

chimera_status cm_writer_sync(cm_writer *w, chimera_error *err)
{
    if (!w->f) return CHIMERA_OK; /* already synced */
    int e = 0;
    /* a device or pipe has nothing to make durable (fsync fails with EINVAL there) */
    if (fflush(w->f) != 0 || (!w->direct && fsync(fileno(w->f)) != 0)) e = errno;
    if (fclose(w->f) != 0 && !e) e = errno;
    w->f = NULL;
    if (!e) return CHIMERA_OK;
    chimera_status s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot write: %s", w->final_path, strerror(e));
    cm_writer_abort(w);
    return s;
}

chimera_status cm_writer_commit(cm_writer *w, chimera_error *err)
{
    chimera_status s = cm_writer_sync(w, err);
    if (s != CHIMERA_OK) return s;
    if (w->direct) {
        cm_writer_abort(w);
        w->published = 1;
        return CHIMERA_OK;
    }
    if (rename(w->tmp_path, w->final_path) != 0) {
        s = cm_fail(err, CHIMERA_ERR_IO, "%s: cannot rename into place: %s", w->final_path,
                    strerror(errno));
    } else {
        w->published = 1;
        cm_free(w->tmp_path);
        w->tmp_path = NULL;
        char *dir = cm_path_dir(w->final_path);
        if (dir) s = cm_fsync_dir(dir, err);
        cm_free(dir);
    }
    cm_writer_abort(w);
    return s;
}

void cm_writer_abort(cm_writer *w)
{
    if (w->f) fclose(w->f);
    w->f = NULL;
    if (w->tmp_path) unlink(w->tmp_path);
    cm_free(w->tmp_path);
    cm_free(w->final_path);
    w->tmp_path = w->final_path = NULL;
    w->direct = 0;
}

chimera_status cm_fsync_dir(const char *dir, chimera_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
    int r = fsync(fd);
    int e = errno;
    close(fd);
    if (r != 0 && e != EINVAL) /* some file systems cannot sync directories */
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot sync: %s", dir, strerror(e));
    return CHIMERA_OK;
}

chimera_status cm_mkdirs(const char *dir, chimera_error *err)
{
    char *p = cm_strdup(dir);
    if (!p) return cm_fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c == '/' || c == '\0') {
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                chimera_status st =
                    cm_fail(err, CHIMERA_ERR_IO, "%s: cannot create directory: %s", p,
                            strerror(errno));
                cm_free(p);
                return st;
            }
            *s = c;
        }
        if (c == '\0') break;
    }
    struct stat sb;
    int ok = stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode);
    cm_free(p);
    if (!ok) return cm_fail(err, CHIMERA_ERR_IO, "%s: not a directory", dir);
    return CHIMERA_OK;
}
