/* Tests of the writer protocol of an index (src/index/store.h: lock, generations,
 * clean-up, readers), with real second processes (fork).
 *
 * What this proves: while one process holds the writer lock, another's lock, meta
 * update and build begin fail with CHIMERA_ERR_BUSY naming the holder's pid after a
 * bounded wait, and a writer waiting with the default timeout completes once the lock
 * is released (it cannot complete before); a holder killed with SIGKILL releases the
 * lock, and the next writer removes what it left (a manifest temporary inside the
 * index, an unfinished temporary directory, a side directory) but not a running build's
 * temporary directory, nor names or files that are not ours; generations count every
 * commit (1 for a new index, + 1 per build or meta update, 0 for an index from before
 * format 1.1) and a stale expected generation fails both kinds of writer with
 * CHIMERA_ERR_CONFLICT and changes nothing; a profile saved through the public API is
 * refused with CHIMERA_ERR_CONFLICT when the index was rebuilt with other data, and two
 * processes saving profiles at once lose none; and with builds, profile saves and
 * opens racing in three processes for hundreds of iterations, every open succeeds and
 * sees one index whole (its meta and its sections from the same build), and the index
 * is readable at the end. Outcomes are deterministic: nothing depends on timing except
 * how much the processes overlap. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "index/format.h"
#include "index/store.h"
#include "index/store_impl.h"
#include "core/alloc.h"

static char root_dir[512];

/* ---- helpers --------------------------------------------------------------------------- */

static void path_of(char *out, size_t cap, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", root_dir, name);
    if (n < 0 || (size_t)n >= cap) out[0] = '\0';
}

static void rm_rf(const char *path)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Entries of root_dir starting with prefix (lock files included or not). */
static int count_prefixed(const char *prefix, int with_locks)
{
    int n = 0;
    DIR *d = opendir(root_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        int lock = len > 5 && strcmp(e->d_name + len - 5, ".lock") == 0;
        if ((with_locks || !lock) && strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    }
    if (d) closedir(d);
    return n;
}

#define SEC_A 4096
#define SEC_B 777

static uint8_t byte_of(uint64_t seed, int sec, uint32_t i)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + (uint64_t)sec * 0xBF58476D1CE4E5B9ull + i;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    return (uint8_t)(x >> 56);
}

static void fill(uint8_t *p, uint32_t n, uint64_t seed, int sec)
{
    for (uint32_t i = 0; i < n; i++) p[i] = byte_of(seed, sec, i);
}

/* A small index: two sections derived from seed, meta {"seed": seed}. With `hold`, the
 * writer is left open (sections written, not committed) in *hold. */
static chimera_status write_small(const char *dir, uint64_t seed, const ix_store_write_opts *opts,
                                  ix_store_writer **hold, chimera_error *err)
{
    ix_store_writer *w;
    chimera_status s = ix_store_writer_begin(dir, opts, &w, err);
    if (s != CHIMERA_OK) return s;
    uint8_t a[SEC_A], b[SEC_B];
    fill(a, SEC_A, seed, 0);
    fill(b, SEC_B, seed, 1);
    if ((s = ix_store_writer_add(w, "a", a, SEC_A, err)) != CHIMERA_OK ||
        (s = ix_store_writer_add(w, "b", b, SEC_B, err)) != CHIMERA_OK) {
        ix_store_writer_abort(w);
        return s;
    }
    if (hold) {
        *hold = w;
        return CHIMERA_OK;
    }
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "seed", (double)seed);
    s = ix_store_writer_commit(w, meta, err);
    cJSON_Delete(meta);
    return s;
}

static double meta_num(const store *st, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(ix_store_meta(st), key);
    return cJSON_IsNumber(it) ? it->valuedouble : -1;
}

/* 1 when the opened store is one build whole: its sections are those of the seed its
 * meta names. */
static int whole(const store *st)
{
    double sd = meta_num(st, "seed");
    if (sd < 0) return 0;
    uint8_t want[SEC_A];
    const void *p;
    uint64_t n;
    fill(want, SEC_A, (uint64_t)sd, 0);
    if (ix_store_section(st, "a", &p, &n) != CHIMERA_OK || n != SEC_A || memcmp(p, want, n))
        return 0;
    fill(want, SEC_B, (uint64_t)sd, 1);
    return ix_store_section(st, "b", &p, &n) == CHIMERA_OK && n == SEC_B && memcmp(p, want, n) == 0;
}

static uint64_t generation_of(const char *dir)
{
    store *st;
    chimera_error err;
    if (ix_store_info(dir, &st, &err) != CHIMERA_OK) return UINT64_MAX;
    uint64_t g = ix_store_generation(st);
    ix_store_close(st);
    return g;
}

static int n_profiles(const char *dir)
{
    store *st;
    chimera_error err;
    if (ix_store_info(dir, &st, &err) != CHIMERA_OK) return -1;
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(ix_store_meta(st), "profiles"));
    ix_store_close(st);
    return n;
}

/* An edit for ix_store_update_meta: sets meta.note = *(int *)user. */
static chimera_status set_note(cJSON *meta, const store *cur, void *user, chimera_error *err)
{
    (void)cur;
    (void)err;
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "note");
    return cJSON_AddNumberToObject(meta, "note", *(int *)user) ? CHIMERA_OK : CHIMERA_ERR_NOMEM;
}

static double note_of(const char *dir)
{
    store *st;
    chimera_error err;
    if (ix_store_info(dir, &st, &err) != CHIMERA_OK) return -2;
    double v = meta_num(st, "note");
    ix_store_close(st);
    return v;
}

/* Blocking one-byte messages between parent and child. */
static void send1(int fd)
{
    char c = 1;
    while (write(fd, &c, 1) < 0 && errno == EINTR) {
    }
}
static int recv1(int fd)
{
    char c;
    ssize_t r;
    while ((r = read(fd, &c, 1)) < 0 && errno == EINTR) {
    }
    return r == 1;
}

static int exited_ok(pid_t pid)
{
    int status = 0;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

/* ---- a held lock blocks writers ------------------------------------------------------ */

static void test_held_lock(void)
{
    char dir[600], link[600], missing[600], alias[700];
    path_of(dir, sizeof dir, "held");
    chimera_error err = {0};
    CHECK_OK(write_small(dir, 1, NULL, NULL, &err), &err);
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    fflush(NULL);
    pid_t holder = fork();
    if (holder == 0) {
        ix_store_lock *l;
        chimera_error cerr;
        if (ix_store_lock_acquire(dir, -1, &l, &cerr) != CHIMERA_OK) _exit(1);
        send1(up[1]);
        recv1(down[0]); /* hold until told */
        ix_store_lock_release(l);
        _exit(0);
    }
    CHECK(recv1(up[0]));

    char pidstr[32];
    snprintf(pidstr, sizeof pidstr, "(pid %ld)", (long)holder);
    ix_store_lock *l = NULL;
    CHECK_STATUS(ix_store_lock_acquire(dir, -1, &l, &err), CHIMERA_ERR_BUSY, &err);
    CHECK(l == NULL);
    CHECKF(strstr(err.msg, "is being changed by another process") && strstr(err.msg, pidstr),
           "%s", err.msg);
    CHECK_STATUS(ix_store_lock_acquire(dir, 30, &l, &err), CHIMERA_ERR_BUSY, &err);
    /* other names of the same index take the same lock: a symbolic link to it, "dir/." */
    ix_store_update_opts uo = {.lock_timeout_ms = 30};
    path_of(link, sizeof link, "held-link");
    CHECK(symlink(dir, link) == 0);
    CHECK_STATUS(ix_store_lock_acquire(link, -1, &l, &err), CHIMERA_ERR_BUSY, &err);
    CHECKF(strstr(err.msg, pidstr) != NULL, "%s", err.msg);
    int other = 6;
    CHECK_STATUS(ix_store_update_meta(link, &uo, set_note, &other, &err), CHIMERA_ERR_BUSY, &err);
    snprintf(alias, sizeof alias, "%s/.", dir);
    CHECK_STATUS(ix_store_lock_acquire(alias, -1, &l, &err), CHIMERA_ERR_BUSY, &err);
    /* a link to nothing names no index whose lock it could take */
    path_of(alias, sizeof alias, "dangling-link");
    path_of(missing, sizeof missing, "no-such-index");
    CHECK(symlink(missing, alias) == 0);
    CHECK_STATUS(ix_store_lock_acquire(alias, -1, &l, &err), CHIMERA_ERR_IO, &err);
    CHECKF(strstr(err.msg, "symbolic link") != NULL, "%s", err.msg);
    CHECK(unlink(alias) == 0);
    int note = 5;
    CHECK_STATUS(ix_store_update_meta(dir, &uo, set_note, &note, &err), CHIMERA_ERR_BUSY, &err);
    CHECKF(strstr(err.msg, pidstr) != NULL, "%s", err.msg);
    ix_store_write_opts wo = {.lock_timeout_ms = 30, .no_sync = 1};
    CHECK_STATUS(write_small(dir, 2, &wo, NULL, &err), CHIMERA_ERR_BUSY, &err);
    CHECK(count_prefixed("held.", 0) == 0); /* the refused build left nothing */
    CHECK(note_of(dir) == -1);

    /* a writer with the default wait cannot finish while the lock is held, and does
     * once it is released */
    fflush(NULL);
    pid_t waiter = fork();
    if (waiter == 0) {
        chimera_error cerr;
        int v = 7;
        _exit(ix_store_update_meta(dir, NULL, set_note, &v, &cerr) == CHIMERA_OK ? 0 : 1);
    }
    usleep(100 * 1000);
    int status;
    CHECK(waitpid(waiter, &status, WNOHANG) == 0); /* still waiting: the lock is held */
    CHECK(note_of(dir) == -1);
    send1(down[1]);
    CHECK(exited_ok(holder));
    CHECK(exited_ok(waiter));
    CHECK(note_of(dir) == 7);
    CHECK(generation_of(dir) == 2);
    /* and it is free again */
    CHECK_OK(ix_store_lock_acquire(dir, -1, &l, &err), &err);
    ix_store_lock_release(l);
    CHECK(unlink(link) == 0);
    close(up[0]);
    close(up[1]);
    close(down[0]);
    close(down[1]);
    rm_rf(dir);
}

/* ---- a killed holder; clean-up of its leftovers ---------------------------------------- */

static void test_killed_holder(void)
{
    char dir[600], p[800];
    path_of(dir, sizeof dir, "dead");
    chimera_error err = {0};
    CHECK_OK(write_small(dir, 3, NULL, NULL, &err), &err);
    /* not ours: must survive every clean-up */
    path_of(p, sizeof p, "dead.tmp-abc"); /* too short for a mkdtemp name */
    CHECK(mkdir(p, 0755) == 0);
    path_of(p, sizeof p, "dead.backup");
    CHECK(mkdir(p, 0755) == 0);
    path_of(p, sizeof p, "dead.tmp-Zz9Yy8"); /* our name, someone else's file inside */
    CHECK(mkdir(p, 0755) == 0);
    path_of(p, sizeof p, "dead.tmp-Zz9Yy8/notes.txt");
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
    path_of(p, sizeof p, "dead.tmp-Zz9Yy8/x.bin");
    f = fopen(p, "w");
    if (f) fclose(f);

    int up[2];
    CHECK(pipe(up) == 0);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        /* an unfinished build (its directory claimed), then the lock, then what a meta
         * update and the rename-aside fallback would have left at that moment */
        ix_store_writer *w = NULL;
        chimera_error cerr;
        ix_store_write_opts ns = {.no_sync = 1};
        if (write_small(dir, 4, &ns, &w, &cerr) != CHIMERA_OK) _exit(1);
        ix_store_lock *l;
        if (ix_store_lock_acquire(dir, -1, &l, &cerr) != CHIMERA_OK) _exit(1);
        char q[800];
        snprintf(q, sizeof q, "%s/%s.tmp-Ab12Cd", dir, FMT_MANIFEST_NAME);
        FILE *g = fopen(q, "w");
        if (!g) _exit(1);
        fputs("{\"magic\": \"chimera-index\", \"trunc", g);
        fclose(g);
        snprintf(q, sizeof q, "%s.old-Qw34Er", dir);
        if (mkdir(q, 0755) != 0) _exit(1);
        send1(up[1]);
        raise(SIGKILL); /* with the lock held and the build's directory claimed */
        _exit(2);
    }
    CHECK(recv1(up[0]));
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFSIGNALED(status) &&
          WTERMSIG(status) == SIGKILL);
    close(up[0]);
    close(up[1]);
    char mtmp[800];
    snprintf(mtmp, sizeof mtmp, "%s/%s.tmp-Ab12Cd", dir, FMT_MANIFEST_NAME);
    CHECK(exists(mtmp));
    CHECK(count_prefixed("dead.tmp-", 0) == 3); /* the killed build's, and two not ours */
    CHECK(count_prefixed("dead.old-", 0) == 1);
    /* the kernel released the lock: no wait at all */
    ix_store_lock *l = NULL;
    CHECK_OK(ix_store_lock_acquire(dir, -1, &l, &err), &err);
    ix_store_lock_release(l);
    /* the index still opens, and a build replaces it despite the manifest temporary
     * (before, such a leftover made every build refuse); the leftovers are gone */
    store *st = NULL;
    CHECK_OK(ix_store_open(dir, 1, &st, &err), &err);
    if (st) CHECK(whole(st) && meta_num(st, "seed") == 3);
    ix_store_close(st);
    ix_store_write_opts ns = {.no_sync = 1, .lock_timeout_ms = -1};
    CHECK_OK(write_small(dir, 5, &ns, NULL, &err), &err);
    CHECK(!exists(mtmp));
    CHECK(count_prefixed("dead.old-", 0) == 0);
    CHECK(count_prefixed("dead.tmp-", 0) == 2); /* only the two that are not ours */
    path_of(p, sizeof p, "dead.tmp-abc");
    CHECK(exists(p));
    path_of(p, sizeof p, "dead.backup");
    CHECK(exists(p));
    path_of(p, sizeof p, "dead.tmp-Zz9Yy8/notes.txt");
    CHECK(exists(p));
    path_of(p, sizeof p, "dead.tmp-Zz9Yy8/x.bin"); /* ours, in a directory no build claims */
    CHECK(!exists(p));
    CHECK(generation_of(dir) == 2);

    /* a meta update cleans up too */
    snprintf(mtmp, sizeof mtmp, "%s/%s.tmp-Zx98Cv", dir, FMT_MANIFEST_NAME);
    f = fopen(mtmp, "w");
    if (f) fclose(f);
    int note = 1;
    CHECK_OK(ix_store_update_meta(dir, NULL, set_note, &note, &err), &err);
    CHECK(!exists(mtmp));
    CHECK(generation_of(dir) == 3);

    /* a running build's directory is left alone, and that build still commits */
    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    fflush(NULL);
    pid_t builder = fork();
    if (builder == 0) {
        ix_store_writer *w = NULL;
        chimera_error cerr;
        ix_store_write_opts o = {.no_sync = 1};
        if (write_small(dir, 6, &o, &w, &cerr) != CHIMERA_OK) _exit(1);
        send1(ready[1]);
        recv1(go[0]);
        cJSON *meta = cJSON_CreateObject();
        cJSON_AddNumberToObject(meta, "seed", 6);
        chimera_status s = ix_store_writer_commit(w, meta, &cerr);
        cJSON_Delete(meta);
        _exit(s == CHIMERA_OK ? 0 : 1);
    }
    CHECK(recv1(ready[0]));
    CHECK(count_prefixed("dead.tmp-", 0) == 3);
    CHECK_OK(write_small(dir, 7, &ns, NULL, &err), &err); /* cleans up, commits */
    CHECK(count_prefixed("dead.tmp-", 0) == 3);         /* the running build's survived */
    CHECK(generation_of(dir) == 4);
    send1(go[1]);
    CHECK(exited_ok(builder));
    CHECK_OK(ix_store_open(dir, 1, &st, &err), &err);
    if (st) CHECK(whole(st) && meta_num(st, "seed") == 6 && ix_store_generation(st) == 5);
    ix_store_close(st);
    CHECK(count_prefixed("dead.tmp-", 0) == 2);
    close(go[0]);
    close(go[1]);
    close(ready[0]);
    close(ready[1]);
    rm_rf(dir);
    path_of(p, sizeof p, "dead.tmp-abc");
    rm_rf(p);
    path_of(p, sizeof p, "dead.tmp-Zz9Yy8");
    rm_rf(p);
    path_of(p, sizeof p, "dead.backup");
    rm_rf(p);
}

/* ---- generations and compare-and-swap ------------------------------------------------- */

/* Rewrites the manifest of the index at dir after `edit` changed its tree, re-signed
 * (manifest_xxh3 recomputed) so that only the edit itself can be caught. */
static void rewrite_manifest(const char *dir, void (*edit)(cJSON *root))
{
    char mp[800];
    snprintf(mp, sizeof mp, "%s/%s", dir, FMT_MANIFEST_NAME);
    cJSON *root = NULL;
    chimera_error err;
    if (ix_store_manifest_load(mp, &root, NULL, &err) != CHIMERA_OK) return;
    edit(root);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "manifest_xxh3");
    uint64_t d;
    char hex[17];
    ix_store_manifest_digest(root, &d);
    ix_fmt_hex_format(hex, d);
    cJSON_AddStringToObject(root, "manifest_xxh3", hex);
    char *text = cJSON_Print(root);
    FILE *f = fopen(mp, "w");
    if (f && text) fputs(text, f);
    if (f) fclose(f);
    cJSON_free(text);
    cJSON_Delete(root);
}

static void edit_legacy(cJSON *root)
{
    cJSON_DeleteItemFromObjectCaseSensitive(root, "generation");
    cJSON_ReplaceItemInObjectCaseSensitive(root, "format_minor", cJSON_CreateNumber(0));
}

static void edit_bad_generation(cJSON *root)
{
    cJSON_ReplaceItemInObjectCaseSensitive(root, "generation", cJSON_CreateNumber(-1));
}

/* Removes "generation" from the manifest and re-signs it: an index as format 1.0 wrote. */
static void make_legacy(const char *dir) { rewrite_manifest(dir, edit_legacy); }

static void test_generations(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "gen");
    chimera_error err = {0};
    ix_store_write_opts ns = {.no_sync = 1};
    CHECK_OK(write_small(dir, 10, &ns, NULL, &err), &err);
    CHECK(generation_of(dir) == 1);
    CHECK_OK(write_small(dir, 11, &ns, NULL, &err), &err); /* a rebuild continues */
    CHECK(generation_of(dir) == 2);
    int note = 1;
    CHECK_OK(ix_store_update_meta(dir, NULL, set_note, &note, &err), &err);
    CHECK(generation_of(dir) == 3);

    /* meta update: compare-and-swap */
    ix_store_update_opts uo = {.check_generation = 1, .expect_generation = 3};
    note = 2;
    CHECK_OK(ix_store_update_meta(dir, &uo, set_note, &note, &err), &err);
    CHECK(generation_of(dir) == 4 && note_of(dir) == 2);
    note = 3;
    CHECK_STATUS(ix_store_update_meta(dir, &uo, set_note, &note, &err), CHIMERA_ERR_CONFLICT, &err);
    CHECKF(strstr(err.msg, "generation 4, expected 3") != NULL, "%s", err.msg);
    CHECK(generation_of(dir) == 4 && note_of(dir) == 2);

    /* build: compare-and-swap at commit; a conflict replaces nothing and leaves nothing */
    ix_store_write_opts cas = {.no_sync = 1, .check_generation = 1, .expect_generation = 3};
    CHECK_STATUS(write_small(dir, 12, &cas, NULL, &err), CHIMERA_ERR_CONFLICT, &err);
    CHECK(count_prefixed("gen.", 0) == 0);
    store *st = NULL;
    CHECK_OK(ix_store_open(dir, 1, &st, &err), &err);
    if (st) CHECK(whole(st) && meta_num(st, "seed") == 11 && ix_store_generation(st) == 4);
    ix_store_close(st);
    cas.expect_generation = 4;
    CHECK_OK(write_small(dir, 12, &cas, NULL, &err), &err);
    CHECK(generation_of(dir) == 5);
    /* an absent target is at generation 0 */
    char fresh[600];
    path_of(fresh, sizeof fresh, "gen-new");
    cas.expect_generation = 1;
    CHECK_STATUS(write_small(fresh, 13, &cas, NULL, &err), CHIMERA_ERR_CONFLICT, &err);
    CHECK(!exists(fresh));
    cas.expect_generation = 0;
    CHECK_OK(write_small(fresh, 13, &cas, NULL, &err), &err);
    CHECK(generation_of(fresh) == 1);
    rm_rf(fresh);

    /* an index from format 1.0 (no generation) reads as 0; its first update makes it 1
     * and raises its minor */
    make_legacy(dir);
    CHECK_OK(ix_store_info(dir, &st, &err), &err);
    uint32_t major = 0, minor = 9;
    if (st) {
        ix_store_format_version(st, &major, &minor);
        CHECK(ix_store_generation(st) == 0 && minor == 0);
        ix_store_close(st);
    }
    note = 4;
    CHECK_OK(ix_store_update_meta(dir, NULL, set_note, &note, &err), &err);
    CHECK_OK(ix_store_open(dir, 1, &st, &err), &err);
    if (st) {
        ix_store_format_version(st, &major, &minor);
        CHECK(ix_store_generation(st) == 1 && minor == FMT_VERSION_MINOR && whole(st));
        ix_store_close(st);
    }
    /* and a malformed generation is corruption, reported as such */
    {
        rewrite_manifest(dir, edit_bad_generation);
        CHECK_STATUS(ix_store_open(dir, 0, &st, &err), CHIMERA_ERR_CORRUPT, &err);
        CHECKF(strstr(err.msg, "generation") != NULL, "%s", err.msg);
        /* a build still replaces it (the damaged number restarts the count) */
        CHECK_OK(write_small(dir, 14, &ns, NULL, &err), &err);
        CHECK(generation_of(dir) == 1);
    }
    rm_rf(dir);
}

/* ---- profiles through the public API --------------------------------------------------- */

static uint64_t data_id_of(const char *dir)
{
    store *st;
    chimera_error err;
    if (ix_store_info(dir, &st, &err) != CHIMERA_OK) return 0;
    uint64_t id = ix_store_data_id(st);
    ix_store_close(st);
    return id;
}

static void test_profile_save(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "prof");
    chimera_error err = {0};
    ix_store_write_opts ns = {.no_sync = 1};
    CHECK_OK(write_small(dir, 20, &ns, NULL, &err), &err);
    chimera_tune_result *res = cm_calloc(1, sizeof *res);
    if (!res) return;
    res->reached = 1;
    res->best.n_probe = 8;
    res->index_generation = generation_of(dir);
    res->index_data_id = data_id_of(dir);
    CHECK(res->index_data_id != 0);
    /* another tune's save (a meta change) does not invalidate this one: they merge */
    CHECK_OK(chimera_index_profile_save(dir, 10, 0.9, res, &err), &err);
    CHECK_OK(chimera_index_profile_save(dir, 100, 0.9, res, &err), &err);
    CHECK(n_profiles(dir) == 2);
    /* rebuilt with other data: refused, nothing changes */
    CHECK_OK(write_small(dir, 21, &ns, NULL, &err), &err);
    uint64_t g = generation_of(dir);
    CHECK_STATUS(chimera_index_profile_save(dir, 10, 0.95, res, &err), CHIMERA_ERR_CONFLICT, &err);
    CHECKF(strstr(err.msg, "rebuilt since it was tuned") != NULL, "%s", err.msg);
    CHECK(generation_of(dir) == g && n_profiles(dir) == 0);
    /* rebuilt with the same data (same input, same seed): still valid */
    CHECK_OK(write_small(dir, 20, &ns, NULL, &err), &err);
    CHECK_OK(chimera_index_profile_save(dir, 10, 0.95, res, &err), &err);
    CHECK(n_profiles(dir) == 1);
    /* a result not from chimera_index_tune (no data id) is not checked */
    res->index_data_id = 0;
    CHECK_OK(write_small(dir, 22, &ns, NULL, &err), &err);
    CHECK_OK(chimera_index_profile_save(dir, 10, 0.95, res, &err), &err);
    CHECK(n_profiles(dir) == 1);

    /* two processes saving at once lose nothing: every read-modify-write is whole */
    enum { PER_CHILD = 40 };
    pid_t kids[2];
    for (int c = 0; c < 2; c++) {
        fflush(NULL);
        kids[c] = fork();
        if (kids[c] == 0) {
            chimera_error cerr;
            for (uint32_t i = 0; i < PER_CHILD; i++)
                if (chimera_index_profile_save(dir, 1000 * (uint32_t)(c + 1) + i, 0.9, res,
                                               &cerr) != CHIMERA_OK) {
                    fprintf(stderr, "save: %s\n", cerr.msg);
                    _exit(1);
                }
            _exit(0);
        }
    }
    CHECK(exited_ok(kids[0]));
    CHECK(exited_ok(kids[1]));
    CHECK(n_profiles(dir) == 1 + 2 * PER_CHILD);
    cm_free(res);
    rm_rf(dir);
}

/* ---- builds, saves and opens racing ----------------------------------------------------- */

/* Child: `iters` opens with verification; every one must succeed and be whole. */
static void reader_loop(const char *dir, int iters)
{
    for (int i = 0; i < iters; i++) {
        store *st = NULL;
        chimera_error err;
        chimera_status s = ix_store_open(dir, 1, &st, &err);
        if (s != CHIMERA_OK) {
            fprintf(stderr, "open %d: %s: %s\n", i, chimera_status_str(s), err.msg);
            _exit(1);
        }
        int ok = whole(st);
        ix_store_close(st);
        if (!ok) {
            fprintf(stderr, "open %d: meta and sections from different builds\n", i);
            _exit(1);
        }
    }
    _exit(0);
}

static void test_race(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "race");
    chimera_error err = {0};
    ix_store_write_opts ns = {.no_sync = 1};
    CHECK_OK(write_small(dir, 30, &ns, NULL, &err), &err);
    enum { BUILDS = 300, SAVES = 300, OPENS = 600 };
    pid_t kids[3];
    fflush(NULL);
    if ((kids[0] = fork()) == 0) { /* builder: two data sets, alternately */
        chimera_error cerr;
        for (int i = 0; i < BUILDS; i++)
            if (write_small(dir, 30 + (uint64_t)(i % 2), &ns, NULL, &cerr) != CHIMERA_OK) {
                fprintf(stderr, "build %d: %s\n", i, cerr.msg);
                _exit(1);
            }
        _exit(0);
    }
    if ((kids[1] = fork()) == 0) { /* tuner: profile saves (unchecked, so all commit) */
        chimera_tune_result *res = cm_calloc(1, sizeof *res);
        chimera_error cerr;
        if (!res) _exit(1);
        res->reached = 1;
        for (int i = 0; i < SAVES; i++)
            if (chimera_index_profile_save(dir, 1 + (uint32_t)(i % 7), 0.9, res, &cerr) !=
                CHIMERA_OK) {
                fprintf(stderr, "save %d: %s\n", i, cerr.msg);
                _exit(1);
            }
        cm_free(res);
        _exit(0);
    }
    if ((kids[2] = fork()) == 0) reader_loop(dir, OPENS);
    CHECK(exited_ok(kids[0]));
    CHECK(exited_ok(kids[1]));
    CHECK(exited_ok(kids[2]));
    store *st = NULL;
    CHECK_OK(ix_store_open(dir, 1, &st, &err), &err);
    if (st) {
        CHECK(whole(st));
        /* every commit counted once: nothing was lost or applied twice */
        CHECK(ix_store_generation(st) == 1 + BUILDS + SAVES);
        ix_store_close(st);
    }
    CHECK(count_prefixed("race.", 0) == 0);
    CHECK(count_prefixed("race.", 1) == 1); /* the lock file */
    rm_rf(dir);
}

/* Readers against back-to-back swaps alone: the reader's retry is what is tested. */
static void test_reader_during_swaps(void)
{
    char dir[600];
    path_of(dir, sizeof dir, "swap");
    chimera_error err = {0};
    ix_store_write_opts ns = {.no_sync = 1};
    CHECK_OK(write_small(dir, 40, &ns, NULL, &err), &err);
    pid_t kids[3];
    fflush(NULL);
    if ((kids[0] = fork()) == 0) {
        chimera_error cerr;
        for (int i = 0; i < 400; i++)
            if (write_small(dir, 40 + (uint64_t)(i % 3), &ns, NULL, &cerr) != CHIMERA_OK) _exit(1);
        _exit(0);
    }
    if ((kids[1] = fork()) == 0) reader_loop(dir, 800);
    if ((kids[2] = fork()) == 0) reader_loop(dir, 800);
    for (int i = 0; i < 3; i++) CHECK(exited_ok(kids[i]));
    rm_rf(dir);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(root_dir, sizeof root_dir, "%s/chimera-lock-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(root_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_held_lock();
    test_killed_holder();
    test_generations();
    test_profile_save();
    test_race();
    test_reader_during_swaps();
    rm_rf(root_dir);
    return check_report();
}
