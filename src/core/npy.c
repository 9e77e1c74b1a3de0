/* .npy reader and writer (see npy.h).
 *
 * The header is a Python dict literal; the parser accepts exactly the grammar NumPy
 * writes (string keys 'descr', 'fortran_order', 'shape' in any order, optional trailing
 * commas, spaces) and rejects anything else rather than guessing. Every count is checked
 * for overflow before it is used, and the data size is compared with the file size
 * before anything is mapped, so hostile headers cannot cause huge allocations or reads
 * beyond the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/mapreg.h"
#include "core/npy.h"
#include "core/alloc.h"

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

size_t cm_dtype_size(cm_dtype t)
{
    switch (t) {
    case CM_F16: return 2;
    case CM_F32:
    case CM_I32: return 4;
    case CM_I64: return 8;
    }
    return 0;
}

const char *cm_dtype_name(cm_dtype t)
{
    switch (t) {
    case CM_F16: return "float16";
    case CM_F32: return "float32";
    case CM_I32: return "int32";
    case CM_I64: return "int64";
    }
    return "?";
}

static const char *descr_of(cm_dtype t)
{
    switch (t) {
    case CM_F16: return "<f2";
    case CM_F32: return "<f4";
    case CM_I32: return "<i4";
    case CM_I64: return "<i8";
    }
    return "?";
}

/* ---- header parsing ---------------------------------------------------------------- */

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int eat(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* Reads a quoted string into buf (truncating is an error). */
static int read_str(cursor *c, char *buf, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (n + 1 >= cap) return 0;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    buf[n] = '\0';
    return 1;
}

static int read_word(cursor *c, const char *w)
{
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

static int read_int(cursor *c, int64_t *v)
{
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p++ - '0';
        if (x > (INT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    /* Python 2 era headers may write 3L */
    if (c->p < c->end && *c->p == 'L') c->p++;
    *v = x;
    return 1;
}

chimera_status cm_npy_parse_header(const void *buf, size_t len, const char *name, cm_npy *out,
                                   size_t *data_offset, chimera_error *err)
{
    const unsigned char *b = buf;
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(b, magic, 6) != 0)
        return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: not a .npy file (bad magic)", name);
    unsigned major = b[6];
    size_t hlen, pre;
    if (major == 1) {
        hlen = (size_t)b[8] | ((size_t)b[9] << 8);
        pre = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: truncated .npy header", name);
        hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
        pre = 12;
    } else {
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED, "%s: .npy format version %u is not supported",
                       name, major);
    }
    if (hlen > len - pre)
        return cm_fail(err, CHIMERA_ERR_FORMAT,
                       "%s: truncated .npy header (needs %zu bytes, file has %zu)", name,
                       pre + hlen, len);
    cursor c = {(const char *)b + pre, (const char *)b + pre + hlen};
    int have_descr = 0, have_order = 0, have_shape = 0;
    char key[32], descr[32];
    if (!eat(&c, '{')) return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: header is not a dict", name);
    while (!eat(&c, '}')) {
        if (!read_str(&c, key, sizeof key) || !eat(&c, ':'))
            return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: malformed header dict", name);
        if (strcmp(key, "descr") == 0) {
            if (!read_str(&c, descr, sizeof descr))
                return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: malformed 'descr'", name);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (read_word(&c, "False")) {
                have_order = 1;
            } else if (read_word(&c, "True")) {
                return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                               "%s: Fortran-order arrays are not supported (save with C order, "
                               "e.g. numpy.ascontiguousarray)",
                               name);
            } else {
                return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: malformed 'fortran_order'", name);
            }
        } else if (strcmp(key, "shape") == 0) {
            if (!eat(&c, '('))
                return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: malformed 'shape'", name);
            out->ndim = 0;
            while (!eat(&c, ')')) {
                int64_t v;
                if (out->ndim == CM_NPY_MAX_DIMS)
                    return cm_fail(err, CHIMERA_ERR_UNSUPPORTED, "%s: more than %d dimensions",
                                   name, CM_NPY_MAX_DIMS);
                if (!read_int(&c, &v))
                    return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: malformed 'shape'", name);
                out->shape[out->ndim++] = v;
                if (!eat(&c, ',')) {
                    if (!eat(&c, ')'))
                        return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: malformed 'shape'", name);
                    break;
                }
            }
            have_shape = 1;
        } else {
            return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: unknown header key '%s'", name, key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}'))
                return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: malformed header dict", name);
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: header lacks '%s'", name,
                       !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    if (descr[0] == '>' && descr[1] != '\0' && strcmp(descr + 2, "1") != 0)
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "%s: big-endian data ('%s') is not supported (use .astype('<%s'))", name,
                       descr, descr + 1);
    const char *t = (descr[0] == '<' || descr[0] == '=' || descr[0] == '|') ? descr + 1 : descr;
    if (strcmp(t, "f4") == 0) out->dtype = CM_F32;
    else if (strcmp(t, "f2") == 0) out->dtype = CM_F16;
    else if (strcmp(t, "i4") == 0) out->dtype = CM_I32;
    else if (strcmp(t, "i8") == 0) out->dtype = CM_I64;
    else
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "%s: dtype '%s' is not supported (vectors: float32 or float16; lengths "
                       "and ids: int32 or int64)", name, descr);
    int64_t count = 1;
    for (int i = 0; i < out->ndim; i++) {
        if (out->shape[i] != 0 && count > INT64_MAX / 8 / out->shape[i])
            return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: shape is too large", name);
        count *= out->shape[i];
    }
    out->count = count;
    *data_offset = pre + hlen;
    return CHIMERA_OK;
}

/* ---- reading ----------------------------------------------------------------------- */

chimera_status cm_npy_open(const char *path, cm_npy *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: not a regular file", path);
    }
    size_t fsize = (size_t)st.st_size;
    if (fsize == 0) {
        close(fd);
        return cm_fail(err, CHIMERA_ERR_FORMAT, "%s: empty file", path);
    }
    void *map = mmap(NULL, fsize, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    size_t off;
    chimera_status s = cm_npy_parse_header(map, fsize, path, out, &off, err);
    if (s != CHIMERA_OK) {
        munmap(map, fsize);
        return s;
    }
    uint64_t need = (uint64_t)out->count * cm_dtype_size(out->dtype);
    uint64_t have = fsize - off;
    if (have != need) {
        munmap(map, fsize);
        if (have < need)
            return cm_fail(err, CHIMERA_ERR_FORMAT,
                           "%s: truncated: the shape needs %llu bytes of data, the file has %llu",
                           path, (unsigned long long)need, (unsigned long long)have);
        return cm_fail(err, CHIMERA_ERR_FORMAT,
                       "%s: %llu unexpected bytes after the data the shape describes", path,
                       (unsigned long long)(have - need));
    }
    if (off % cm_dtype_size(out->dtype) != 0) {
        /* Writers other than NumPy may not align the data; typed access needs it, so
         * such a file is copied (NumPy itself pads headers to 16 or 64 bytes). */
        void *copy = cm_aligned_alloc(64, (size_t)need);
        if (!copy) {
            munmap(map, fsize);
            return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory copying unaligned data",
                           path);
        }
        memcpy(copy, (const char *)map + off, (size_t)need);
        munmap(map, fsize);
        out->copy = copy;
        out->data = copy;
        return CHIMERA_OK;
    }
    out->map = map;
    out->map_len = fsize;
    out->data = (const char *)map + off;
    /* a file truncated while mapped faults (SIGBUS) on access: let a front end's handler
     * name it (core/mapreg.h) */
    out->map_reg = cm_map_register(map, fsize, path);
    return CHIMERA_OK;
}

void cm_npy_close(cm_npy *a)
{
    cm_map_unregister(a->map_reg);
    if (a->map) munmap(a->map, a->map_len);
    cm_free(a->copy);
    memset(a, 0, sizeof *a);
}

chimera_status cm_npy_read_i64(const char *path, int64_t **out, int64_t *n, chimera_error *err)
{
    *out = NULL;
    *n = 0;
    cm_npy a;
    CM_TRY(cm_npy_open(path, &a, err));
    chimera_status s = CHIMERA_OK;
    if (a.ndim != 1) {
        s = cm_fail(err, CHIMERA_ERR_DIM, "%s: expected a 1-D array, got %d dimensions", path,
                    a.ndim);
    } else if (a.dtype != CM_I32 && a.dtype != CM_I64) {
        s = cm_fail(err, CHIMERA_ERR_UNSUPPORTED, "%s: expected int32 or int64, got %s", path,
                    cm_dtype_name(a.dtype));
    } else {
        int64_t *v = cm_malloc((size_t)a.count * sizeof *v);
        if (!v) {
            s = cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
        } else {
            if (a.dtype == CM_I64) {
                memcpy(v, a.data, (size_t)a.count * sizeof *v);
            } else {
                const int32_t *src = a.data;
                for (int64_t i = 0; i < a.count; i++) v[i] = src[i];
            }
            *out = v;
            *n = a.count;
        }
    }
    cm_npy_close(&a);
    return s;
}

/* ---- writing ----------------------------------------------------------------------- */

chimera_status cm_npy_begin(cm_writer *w, const char *path, cm_dtype dtype, int ndim,
                            const int64_t *shape, chimera_error *err)
{
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr_of(dtype));
    for (int i = 0; i < ndim; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i],
                      ndim == 1 ? "," : i + 1 < ndim ? ", " : "");
    n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    /* Version 1.0 header padded with spaces and a newline so that data starts on a
     * 64-byte boundary (NumPy's own alignment). */
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    unsigned char head[640];
    memcpy(head, magic, 6);
    head[6] = 1;
    head[7] = 0;
    size_t hlen = padded - 10;
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8);
    memcpy(head + 10, dict, (size_t)n);
    memset(head + 10 + n, ' ', padded - total);
    head[padded - 1] = '\n';
    CM_TRY(cm_writer_open(w, path, err));
    chimera_status s = cm_writer_write(w, head, padded, err);
    if (s != CHIMERA_OK) {
        cm_writer_abort(w);
        return s;
    }
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) count *= shape[i];
    w->written = 0; /* count data bytes only from here on */
    w->expect = (uint64_t)count * cm_dtype_size(dtype);
    return CHIMERA_OK;
}

chimera_status cm_npy_end(cm_writer *w, chimera_error *err)
{
    if (w->written != w->expect) {
        chimera_status s = cm_fail(err, CHIMERA_ERR_INTERNAL,
                                   "%s: wrote %llu data bytes, the shape needs %llu",
                                   w->final_path, (unsigned long long)w->written,
                                   (unsigned long long)w->expect);
        cm_writer_abort(w);
        return s;
    }
    return cm_writer_sync(w, err);
}

chimera_status cm_npy_finish(cm_writer *w, chimera_error *err)
{
    CM_TRY(cm_npy_end(w, err));
    return cm_writer_commit(w, err);
}

chimera_status cm_npy_write(const char *path, cm_dtype dtype, int ndim, const int64_t *shape,
                            const void *data, chimera_error *err)
{
    cm_writer w;
    CM_TRY(cm_npy_begin(&w, path, dtype, ndim, shape, err));
    chimera_status s = cm_writer_write(&w, data, (size_t)w.expect, err);
    if (s != CHIMERA_OK) {
        cm_writer_abort(&w);
        return s;
    }
    return cm_npy_finish(&w, err);
}
