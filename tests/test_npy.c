/* .npy reading and writing: every supported dtype and shape round-trips byte-exactly;
 * headers in the variants NumPy writes (versions 1-3, key order, spacing, trailing
 * commas) parse; unsupported or malformed inputs (big-endian, Fortran order, other
 * dtypes, bad dicts, truncated or over-long data) fail with the right status and a
 * message naming the file; and a fuzz loop of random byte mutations and truncations of
 * valid files never crashes and never returns data the file does not hold. */
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "tmpdir.h"
#include "core/npy.h"
#include "core/rng.h"
#include "core/alloc.h"

static void test_roundtrip(void)
{
    char p[512];
    test_path(p, sizeof p, "rt.npy");
    cm_dtype types[] = {CM_F32, CM_F16, CM_I32, CM_I64};
    int64_t shapes[][3] = {{5, 3, 0}, {1, 1, 0}, {0, 4, 0}, {7, 2, 3}, {17, 0, 0}};
    int ndims[] = {2, 2, 2, 3, 1};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 5; s++) {
            int64_t count = 1;
            for (int i = 0; i < ndims[s]; i++) count *= shapes[s][i];
            size_t bytes = (size_t)count * cm_dtype_size(types[t]);
            unsigned char *data = cm_malloc(bytes + 1);
            for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)(i * 37 + t);
            chimera_error err;
            CHECK_OK(cm_npy_write(p, types[t], ndims[s], shapes[s], data, &err), &err);
            cm_npy a;
            CHECK_OK(cm_npy_open(p, &a, &err), &err);
            CHECK(a.dtype == types[t] && a.ndim == ndims[s] && a.count == count);
            for (int i = 0; i < ndims[s]; i++) CHECK(a.shape[i] == shapes[s][i]);
            CHECK(bytes == 0 || memcmp(a.data, data, bytes) == 0);
            CHECK(((uintptr_t)a.data % 64) == 0); /* header padded to 64 bytes */
            cm_npy_close(&a);
            cm_free(data);
        }
}

/* Builds a file from a raw header dict and data. */
static void write_raw(const char *path, int major, const char *dict, const void *data,
                      size_t n)
{
    unsigned char buf[4096];
    size_t dl = strlen(dict), pre = major == 1 ? 10 : 12;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (unsigned char)(dl & 0xff);
        buf[9] = (unsigned char)(dl >> 8);
    } else {
        buf[8] = (unsigned char)(dl & 0xff);
        buf[9] = (unsigned char)(dl >> 8);
        buf[10] = buf[11] = 0;
    }
    memcpy(buf + pre, dict, dl);
    memcpy(buf + pre + dl, data, n);
    test_write_file(path, buf, pre + dl + n);
}

static void expect(const char *dict, int major, size_t nbytes, chimera_status want,
                   const char *msg_part)
{
    char p[512];
    test_path(p, sizeof p, "h.npy");
    unsigned char data[256] = {0};
    write_raw(p, major, dict, data, nbytes);
    cm_npy a;
    chimera_error err = {0};
    chimera_status s = cm_npy_open(p, &a, &err);
    CHECKF(s == want, "header %s: got %s (%s), want %s", dict, chimera_status_str(s), err.msg,
           chimera_status_str(want));
    if (s == CHIMERA_OK) cm_npy_close(&a);
    else {
        CHECKF(strstr(err.msg, "h.npy") != NULL, "message '%s' does not name the file", err.msg);
        if (msg_part)
            CHECKF(strstr(err.msg, msg_part) != NULL, "message '%s' lacks '%s'", err.msg,
                   msg_part);
    }
}

static void test_headers(void)
{
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 1, 24, CHIMERA_OK, 0);
    expect("{'shape': (2,3), 'fortran_order': False, 'descr': '<f4'}", 1, 24, CHIMERA_OK, 0);
    expect("{\"descr\":\"<i8\",\"fortran_order\":False,\"shape\":(3,)}", 2, 24, CHIMERA_OK, 0);
    expect("{'descr': '<i4', 'fortran_order': False, 'shape': (3L, 2L), }", 3, 24, CHIMERA_OK, 0);
    expect("{'descr': '|f2', 'fortran_order': False, 'shape': (), }", 1, 2, CHIMERA_OK, 0);
    expect("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 1, 24,
           CHIMERA_ERR_UNSUPPORTED, "big-endian");
    expect("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 1, 24,
           CHIMERA_ERR_UNSUPPORTED, "Fortran");
    expect("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 1, 24,
           CHIMERA_ERR_UNSUPPORTED, "<f8");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1, 20,
           CHIMERA_ERR_FORMAT, "truncated");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 1, 28,
           CHIMERA_ERR_FORMAT, "unexpected bytes");
    expect("{'descr': '<f4', 'shape': (2, 3), }", 1, 24, CHIMERA_ERR_FORMAT, "fortran_order");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", 1, 24,
           CHIMERA_ERR_FORMAT, "shape");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }", 1,
           24, CHIMERA_ERR_FORMAT, "too large");
    expect("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 1, 24,
           CHIMERA_ERR_FORMAT, "unknown");
    expect("['descr']", 1, 0, CHIMERA_ERR_FORMAT, "dict");
    char p[512];
    test_path(p, sizeof p, "bad.npy");
    test_write_file(p, "NOTNUMPYxxxxxxxxxxxxxx", 22);
    cm_npy a;
    chimera_error err;
    CHECK_STATUS(cm_npy_open(p, &a, &err), CHIMERA_ERR_FORMAT, &err);
    test_write_file(p, "", 0);
    CHECK_STATUS(cm_npy_open(p, &a, &err), CHIMERA_ERR_FORMAT, &err);
    test_path(p, sizeof p, "missing.npy");
    CHECK_STATUS(cm_npy_open(p, &a, &err), CHIMERA_ERR_IO, &err);
    CHECK(strstr(err.msg, "missing.npy") != NULL);
}

/* Mutates bytes of a valid file's header (and cuts it short) many times; each open
 * must either fail or describe data that fits inside the file. */
static void test_fuzz(void)
{
    char p[512], q[512];
    test_path(p, sizeof p, "fz_src.npy");
    test_path(q, sizeof q, "fz.npy");
    float data[6 * 5];
    for (int i = 0; i < 30; i++) data[i] = (float)i;
    int64_t shape[2] = {6, 5};
    chimera_error err;
    CHECK_OK(cm_npy_write(p, CM_F32, 2, shape, data, &err), &err);
    FILE *f = fopen(p, "rb");
    unsigned char orig[1024];
    size_t n = fread(orig, 1, sizeof orig, f);
    fclose(f);
    cm_rng r;
    cm_rng_seed(&r, 1234, 0);
    int consistent = 1, failures = 0;
    for (int it = 0; it < 3000; it++) {
        unsigned char buf[1024];
        memcpy(buf, orig, n);
        size_t len = n;
        int muts = 1 + (int)cm_rng_below(&r, 4);
        for (int m = 0; m < muts; m++) {
            size_t at = (size_t)cm_rng_below(&r, 74); /* within the header */
            buf[at] = (unsigned char)cm_rng_below(&r, 256);
        }
        if (cm_rng_below(&r, 4) == 0) len = (size_t)cm_rng_below(&r, n + 1);
        test_write_file(q, buf, len);
        cm_npy a;
        if (cm_npy_open(q, &a, &err) == CHIMERA_OK) {
            size_t bytes = (size_t)a.count * cm_dtype_size(a.dtype);
            consistent &= a.copy || (const unsigned char *)a.data + bytes <= (const unsigned char *)a.map + len;
            consistent &= bytes <= len;
            cm_npy_close(&a);
        } else {
            failures++;
            consistent &= err.msg[0] != '\0';
        }
    }
    CHECK(consistent);
    CHECK(failures > 1000); /* most mutations must be caught */
}

static void test_read_i64(void)
{
    char p[512];
    test_path(p, sizeof p, "lens.npy");
    int32_t v32[4] = {3, -1, 7, 0};
    int64_t shape[2] = {4, 1};
    chimera_error err;
    CHECK_OK(cm_npy_write(p, CM_I32, 1, shape, v32, &err), &err);
    int64_t *v, n;
    CHECK_OK(cm_npy_read_i64(p, &v, &n, &err), &err);
    CHECK(n == 4 && v[0] == 3 && v[1] == -1 && v[2] == 7 && v[3] == 0);
    cm_free(v);
    CHECK_OK(cm_npy_write(p, CM_I32, 2, shape, v32, &err), &err);
    CHECK_STATUS(cm_npy_read_i64(p, &v, &n, &err), CHIMERA_ERR_DIM, &err);
    float f[4] = {0};
    CHECK_OK(cm_npy_write(p, CM_F32, 1, shape, f, &err), &err);
    CHECK_STATUS(cm_npy_read_i64(p, &v, &n, &err), CHIMERA_ERR_UNSUPPORTED, &err);
}

static void test_atomic_write(void)
{
    /* A failed write leaves an existing file untouched and no temporary behind. */
    char p[512];
    test_path(p, sizeof p, "keep.npy");
    int64_t shape[1] = {3};
    int64_t v[3] = {1, 2, 3};
    chimera_error err;
    CHECK_OK(cm_npy_write(p, CM_I64, 1, shape, v, &err), &err);
    cm_writer w;
    CHECK_OK(cm_npy_begin(&w, p, CM_I64, 1, shape, &err), &err);
    CHECK_OK(cm_writer_write(&w, v, 8, &err), &err); /* 8 of the 24 bytes promised */
    CHECK_STATUS(cm_npy_finish(&w, &err), CHIMERA_ERR_INTERNAL, &err);
    int64_t *got, n;
    CHECK_OK(cm_npy_read_i64(p, &got, &n, &err), &err);
    CHECK(n == 3 && got[2] == 3);
    cm_free(got);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c tmp- >/dev/null", test_tmpdir());
    CHECK(system(cmd) != 0); /* grep found no temporary file */
    CHECK_STATUS(cm_npy_write("/nonexistent-dir/x.npy", CM_I64, 1, shape, v, &err),
                 CHIMERA_ERR_IO, &err);
    CHECK(strstr(err.msg, "/nonexistent-dir/x.npy") != NULL);
}

int main(void)
{
    test_roundtrip();
    test_headers();
    test_fuzz();
    test_read_i64();
    test_atomic_write();
    return check_report();
}
