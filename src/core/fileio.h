/* Crash-safe file writing: data goes to a temporary file beside the target, is synced,
 * and is renamed over the target only on commit (then the directory is synced), so a
 * failure or a crash never leaves a partial file and never damages an existing one. */
#ifndef CHIMERA_CORE_FILEIO_H
#define CHIMERA_CORE_FILEIO_H

#include <stdint.h>
#include <stdio.h>

#include "chimera.h"

typedef struct cm_writer {
    FILE *f;
    char *tmp_path;   /* owned */
    char *final_path; /* owned */
    int direct;       /* 1: the target is a device, FIFO or socket, written in place */
    uint64_t written;
    uint64_t expect; /* bytes a format writer promised (npy data), checked on finish */
    int published;   /* 1 once cm_writer_commit put the file in place (even if the
                      * directory's fsync then failed); abort leaves it set */
} cm_writer;

/* Creates "<path>.tmp-XXXXXX" in the target's directory. Where the target is a symbolic
 * link, the file it points to is the target (the link stays a link). Where it is not a
 * regular file but a character device, FIFO or socket (/dev/null, /dev/stdout, a pipe),
 * it is written in place: renaming a file over /dev/null would replace the device, and
 * such targets cannot hold a partial file anyway. A directory is refused. */
chimera_status cm_writer_open(cm_writer *w, const char *path, chimera_error *err);
chimera_status cm_writer_write(cm_writer *w, const void *data, size_t n, chimera_error *err);
chimera_status cm_writer_printf(cm_writer *w, chimera_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Flushes, fsyncs and closes the temporary file but does not rename it. A set of files
 * that belong together is synced first, one by one, and renamed only once all of them
 * are complete, so a failure in any leaves every target as it was. On failure the
 * temporary file is removed and the writer closed. */
chimera_status cm_writer_sync(cm_writer *w, chimera_error *err);
/* Syncs (unless cm_writer_sync already did), renames into place and fsyncs the
 * directory; the writer is closed either way (on failure the temporary file is
 * removed). A failure of the directory's fsync comes after the rename: the file is in
 * place (w->published), only its durability is unknown. */
chimera_status cm_writer_commit(cm_writer *w, chimera_error *err);
/* Closes and removes the temporary file. Safe on a writer that failed to open or was
 * already committed. */
void cm_writer_abort(cm_writer *w);

/* fsync()s a directory so a rename inside it is durable. */
chimera_status cm_fsync_dir(const char *dir, chimera_error *err);

/* Creates a directory (and its parents) if missing. */
chimera_status cm_mkdirs(const char *dir, chimera_error *err);

/* The directory part of a path ("." when it has none, "/" for "/x"), as a new string
 * (NULL when out of memory). */
char *cm_path_dir(const char *path);

/* Joins dir and name with '/' into a new string (NULL when out of memory). */
char *cm_path_join(const char *dir, const char *name);

#endif
