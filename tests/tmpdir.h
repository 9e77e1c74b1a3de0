/* A scratch directory per test process, removed at exit. */
#ifndef CHIMERA_TESTS_TMPDIR_H
#define CHIMERA_TESTS_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char test_tmp_[256];

static void test_tmp_cleanup_(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", test_tmp_);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", test_tmp_);
}

/* Returns the directory (created on first call). */
static inline const char *test_tmpdir(void)
{
    if (!test_tmp_[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(test_tmp_, sizeof test_tmp_, "%s/chimera-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(test_tmp_)) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(test_tmp_cleanup_);
    }
    return test_tmp_;
}

/* Writes path = tmpdir/name into buf. */
static inline const char *test_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", test_tmpdir(), name);
    return buf;
}

static inline void test_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

#endif
