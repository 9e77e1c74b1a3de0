/* A file truncated under a mapping is reported by name, not as a crash. Deterministic:
 * a child process installs the CLI's SIGBUS guard (tools/guard.c, compiled into this
 * test), maps a file through the library, truncates it in place and touches a page past
 * the new end; it must exit with status 1 and print
 * "chimera: error: FILE was truncated or changed while in use" naming the file: an
 * input .npy (core/npy.c's mapping), an index section (the store's mapping), and, for a
 * mapping the library does not hold, the generic bus-error line. The registry itself is
 * checked directly: lookups inside and outside a range, the tail of a long path kept,
 * a full table refusing quietly, a slot reused after unregistering. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "core/mapreg.h"
#include "core/npy.h"
#include "index/store.h"
#include "tmpdir.h"
#include "core/alloc.h"

#define BIG (1 << 16) /* bytes of data: several pages, so a page past the cut exists */

/* ---- the registry ------------------------------------------------------------------ */

static void test_registry(void)
{
    static char region[4096];
    char buf[256];
    int h = cm_map_register(region + 100, 1000, "/some/dir/tokens.npy");
    CHECK(h > 0);
    CHECK(cm_map_describe(region + 100, buf, sizeof buf) == strlen("/some/dir/tokens.npy"));
    CHECK(strcmp(buf, "/some/dir/tokens.npy") == 0);
    CHECK(cm_map_describe(region + 1099, buf, sizeof buf) > 0);
    CHECK(cm_map_describe(region + 1100, buf, sizeof buf) == 0 && buf[0] == '\0');
    CHECK(cm_map_describe(region + 99, buf, sizeof buf) == 0);
    CHECK(chimera_mapping_describe(region + 500, buf, sizeof buf) > 0 && strstr(buf, "tokens.npy"));
    /* a short buffer gets a truncated, terminated name */
    char small[5];
    CHECK(cm_map_describe(region + 100, small, sizeof small) == 4 && strcmp(small, "/som") == 0);
    cm_map_unregister(h);
    CHECK(cm_map_describe(region + 100, buf, sizeof buf) == 0);

    /* a long path keeps its tail (the file name) */
    char longp[600];
    memset(longp, 'd', sizeof longp);
    longp[0] = '/';
    strcpy(longp + 560, "/centroids.bin");
    h = cm_map_register(region, 10, longp);
    CHECK(h > 0);
    size_t n = cm_map_describe(region, buf, sizeof buf);
    CHECK(n == CM_MAP_NAME - 1 && strstr(buf, "/centroids.bin") &&
          strcmp(buf + n - strlen("/centroids.bin"), "/centroids.bin") == 0);
    cm_map_unregister(h);

    /* a full table: registration returns 0, nothing breaks; freed slots are reused */
    int hs[CM_MAP_SLOTS + 1], got = 0;
    for (int i = 0; i < CM_MAP_SLOTS + 1; i++) {
        hs[i] = cm_map_register(region + i, 1, "x");
        if (hs[i] > 0) got++;
    }
    CHECK(got <= CM_MAP_SLOTS && hs[CM_MAP_SLOTS] == 0);
    cm_map_unregister(0); /* the "not registered" handle is a no-op */
    for (int i = 0; i < CM_MAP_SLOTS + 1; i++) cm_map_unregister(hs[i]);
    h = cm_map_register(region, 1, "again");
    CHECK(h > 0 && cm_map_describe(region, buf, sizeof buf) == 5);
    cm_map_unregister(h);
}

/* ---- truncation under a mapping in a child process ---------------------------------- */

typedef enum { MAP_NPY, MAP_SECTION, MAP_FOREIGN } map_kind;

/* In the child: map `path` the way `kind` says, truncate it to 100 bytes, read a byte a
 * few pages in. Only returns if no signal came (then exits 3). */
static void child(map_kind kind, const char *path, const char *index_dir)
{
    cli_sigbus_guard();
    const volatile unsigned char *p = NULL;
    chimera_error err;
    if (kind == MAP_NPY) {
        cm_npy a;
        if (cm_npy_open(path, &a, &err) != CHIMERA_OK) {
            fprintf(stderr, "open: %s\n", err.msg);
            _exit(4);
        }
        p = a.data;
    } else if (kind == MAP_SECTION) {
        store *st;
        const void *d;
        uint64_t bytes;
        if (ix_store_open(index_dir, 0, &st, &err) != CHIMERA_OK ||
            ix_store_section(st, "big", &d, &bytes) != CHIMERA_OK) {
            fprintf(stderr, "open: %s\n", err.msg);
            _exit(4);
        }
        p = d;
    } else {
        int fd = open(path, O_RDONLY);
        void *m = fd >= 0 ? mmap(NULL, BIG, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (m == MAP_FAILED) _exit(4);
        p = m;
    }
    if (truncate(path, 100) != 0) _exit(5);
    unsigned char c = p[BIG / 2];
    (void)c;
    _exit(3);
}

/* Runs child(kind...) with stderr into a pipe; returns its exit status (or 128 + signal)
 * and its stderr in out. */
static int run_child(map_kind kind, const char *path, const char *index_dir, char *out,
                     size_t cap)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        child(kind, path, index_dir);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < cap && (r = read(fds[0], out + got, cap - 1 - got)) > 0) got += (size_t)r;
    out[got] = '\0';
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void expect_named(map_kind kind, const char *path, const char *index_dir,
                         const char *name)
{
    char out[1024], want[700];
    int rc = run_child(kind, path, index_dir, out, sizeof out);
    snprintf(want, sizeof want, "chimera: error: %s was truncated or changed while in use\n",
             name);
    CHECKF(rc == 1 && strcmp(out, want) == 0, "kind %d: exit %d, stderr '%s', expected '%s'",
           (int)kind, rc, out, want);
}

static void test_truncated_npy(void)
{
    char path[512];
    test_path(path, sizeof path, "tokens.npy");
    float *v = cm_malloc(BIG);
    for (int i = 0; i < BIG / 4; i++) v[i] = (float)i;
    int64_t shape[2] = {BIG / 4 / 64, 64};
    chimera_error err;
    CHECK_OK(cm_npy_write(path, CM_F32, 2, shape, v, &err), &err);
    cm_free(v);
    expect_named(MAP_NPY, path, NULL, path);
}

static void test_truncated_section(void)
{
    char dir[512], path[600];
    test_path(dir, sizeof dir, "idx");
    snprintf(path, sizeof path, "%s/big.bin", dir);
    uint8_t *data = cm_calloc(BIG, 1);
    chimera_error err;
    ix_store_write_opts wo = {.no_sync = 1};
    ix_store_writer *w;
    CHECK_OK(ix_store_writer_begin(dir, &wo, &w, &err), &err);
    CHECK_OK(ix_store_writer_add(w, "big", data, BIG, &err), &err);
    CHECK_OK(ix_store_writer_commit(w, NULL, &err), &err);
    cm_free(data);
    expect_named(MAP_SECTION, path, dir, path);
}

static void test_foreign_mapping(void)
{
    char path[512];
    test_path(path, sizeof path, "foreign.bin");
    char *zero = cm_calloc(BIG, 1);
    test_write_file(path, zero, BIG);
    cm_free(zero);
    char out[1024];
    int rc = run_child(MAP_FOREIGN, path, NULL, out, sizeof out);
    CHECKF(rc == 1 && strstr(out, "chimera: error: bus error") != NULL,
           "foreign mapping: exit %d, stderr '%s'", rc, out);
}

int main(void)
{
    test_registry();
    test_truncated_npy();
    test_truncated_section();
    test_foreign_mapping();
    return check_report();
}
