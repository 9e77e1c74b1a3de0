/* NumPy .npy files: read (memory-mapped) and write, format versions 1.0, 2.0 and 3.0.
 *
 * Supported: little-endian float32, float16, int32 and int64 ("<f4", "<f2", "<i4",
 * "<i8"; "=" and "|" byte orders are read as native little-endian), C order, up to 8
 * dimensions. Anything else — big-endian data, Fortran order, other dtypes, a header
 * that does not parse, a data size that does not match the shape — is an error whose
 * message names the file and the problem. The data of a read file is a view into a
 * private read-only mapping: large token matrices are never copied. */
#ifndef CHIMERA_CORE_NPY_H
#define CHIMERA_CORE_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "chimera.h"
#include "core/fileio.h"

#define CM_NPY_MAX_DIMS 8

typedef enum cm_dtype { CM_F32 = 0, CM_F16 = 1, CM_I32 = 2, CM_I64 = 3 } cm_dtype;

size_t cm_dtype_size(cm_dtype t);
const char *cm_dtype_name(cm_dtype t); /* "float32", ... */

typedef struct cm_npy {
    cm_dtype dtype;
    int ndim;
    int64_t shape[CM_NPY_MAX_DIMS];
    int64_t count;      /* product of shape */
    const void *data;   /* count * dtype size bytes; points into the mapping */
    void *map;          /* mapping base (NULL when the data was copied) */
    size_t map_len;
    void *copy;         /* aligned copy of data whose file offset was misaligned */
    int map_reg;        /* cm_map_register handle of the mapping (0: none) */
} cm_npy;

/* Parses the header at the start of `buf` (`len` bytes available). On success fills
 * dtype/ndim/shape/count of *out (not data) and the data offset. Used by cm_npy_open
 * and exposed for the fuzz test. `name` labels messages. */
chimera_status cm_npy_parse_header(const void *buf, size_t len, const char *name, cm_npy *out,
                                   size_t *data_offset, chimera_error *err);

/* Opens and maps `path`, checking that the file holds exactly the data its header
 * promises. */
chimera_status cm_npy_open(const char *path, cm_npy *out, chimera_error *err);
void cm_npy_close(cm_npy *a);

/* Reads a 1-D integer array (int32 or int64) into a new int64 array (cm_free it). */
chimera_status cm_npy_read_i64(const char *path, int64_t **out, int64_t *n, chimera_error *err);

/* Starts writing `path` atomically: writes the header; the caller then appends exactly
 * count * dtype-size bytes with cm_writer_write and calls cm_npy_finish. */
chimera_status cm_npy_begin(cm_writer *w, const char *path, cm_dtype dtype, int ndim,
                            const int64_t *shape, chimera_error *err);
/* Checks the byte count and commits (or aborts on a mismatch). */
chimera_status cm_npy_finish(cm_writer *w, chimera_error *err);
/* Checks the byte count and syncs without renaming (cm_writer_sync), for a set of files
 * renamed together with cm_writer_commit once all are complete. */
chimera_status cm_npy_end(cm_writer *w, chimera_error *err);

/* Writes a whole array in one call. */
chimera_status cm_npy_write(const char *path, cm_dtype dtype, int ndim, const int64_t *shape,
                            const void *data, chimera_error *err);

#endif
