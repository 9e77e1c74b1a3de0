/* The sharded layout (shards.h): its manifest, the plan of a new generation, the split
 * of a corpus and the merge of the shards' results. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "shards.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(chimera_error *err, chimera_status code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return 1;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int shards_is_layout(const char *dir)
{
    char *p = join(dir, SHARDS_MANIFEST);
    struct stat st;
    int yes = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return yes;
}

void shards_free(shard_layout *l)
{
    if (l->lock_fd > 0) close(l->lock_fd);
    for (int i = 0; l->shards && i < l->n_shards; i++) free(l->shards[i].dir);
    free(l->shards);
    free(l->codebook);
    memset(l, 0, sizeof *l);
}

static char *read_text(const char *path, chimera_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail(err, CHIMERA_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && n < (1 << 26) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n)
        buf[n] = 0;
    else {
        free(buf);
        buf = NULL;
        fail(err, CHIMERA_ERR_IO, "%s: cannot read", path);
    }
    fclose(f);
    return buf;
}

static int get_i64(const cJSON *o, const char *key, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9.0e15) return 0;
    *out = (int64_t)v->valuedouble;
    return 1;
}

/* A name the manifest gives must stay inside DIR: one plain path component. */
static int plain_name(const char *s)
{
    return s && s[0] && s[0] != '.' && !strchr(s, '/') && strlen(s) < 256;
}

int shards_read(const char *dir, shard_layout *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    char *path = join(dir, SHARDS_MANIFEST);
    if (!path) return fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    if (!shards_is_layout(dir)) {
        free(path);
        return fail(err, CHIMERA_ERR_IO, "%s is not a sharded index (no %s there; chimera build "
                    "--shards N or chimera-mpi build makes one)", dir, SHARDS_MANIFEST);
    }
    char *text = read_text(path, err);
    if (!text) {
        free(path);
        return 1;
    }
    cJSON *m = cJSON_Parse(text);
    free(text);
    int rc = 1;
    int64_t gen, dim, k, nd, nt;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(m, "seed");
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(m, "codebook");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(m, "shards");
    if (!m || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "chimera-shards 1") != 0 ||
        !get_i64(m, "generation", &gen) || !get_i64(m, "dim", &dim) ||
        !get_i64(m, "n_clusters", &k) || !get_i64(m, "n_docs", &nd) ||
        !get_i64(m, "n_tokens", &nt) || !cJSON_IsString(seed) || !cJSON_IsString(cb) ||
        !plain_name(cb->valuestring) || !cJSON_IsArray(list) || cJSON_GetArraySize(list) < 1 ||
        cJSON_GetArraySize(list) > SHARDS_MAX) {
        fail(err, CHIMERA_ERR_FORMAT, "%s: not a valid shards manifest", path);
        goto done;
    }
    out->generation = (uint64_t)gen;
    out->dim = (uint32_t)dim;
    out->n_clusters = (uint32_t)k;
    out->seed = strtoull(seed->valuestring, NULL, 10);
    out->n_docs = nd;
    out->n_tokens = nt;
    out->n_shards = cJSON_GetArraySize(list);
    out->codebook = join(dir, cb->valuestring);
    out->shards = calloc((size_t)out->n_shards, sizeof *out->shards);
    if (!out->codebook || !out->shards) {
        fail(err, CHIMERA_ERR_NOMEM, "out of memory");
        goto done;
    }
    int64_t sum_d = 0, sum_t = 0;
    for (int i = 0; i < out->n_shards; i++) {
        const cJSON *e = cJSON_GetArrayItem(list, i);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(e, "dir");
        shard_entry *s = &out->shards[i];
        if (!cJSON_IsString(d) || !plain_name(d->valuestring) ||
            !get_i64(e, "first_doc", &s->first_doc) || !get_i64(e, "n_docs", &s->n_docs) ||
            !get_i64(e, "n_tokens", &s->n_tokens)) {
            fail(err, CHIMERA_ERR_FORMAT, "%s: shard %d's entry is invalid", path, i);
            goto done;
        }
        if (!(s->dir = join(dir, d->valuestring))) {
            fail(err, CHIMERA_ERR_NOMEM, "out of memory");
            goto done;
        }
        struct stat st;
        if (stat(s->dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fail(err, CHIMERA_ERR_IO, "%s: shard %d (%s) is missing", path, i, s->dir);
            goto done;
        }
        sum_d += s->n_docs;
        sum_t += s->n_tokens;
    }
    if (sum_d != nd || sum_t != nt) {
        fail(err, CHIMERA_ERR_FORMAT, "%s: the shards hold %" PRId64 " documents / %" PRId64
             " tokens, the manifest says %" PRId64 " / %" PRId64, path, sum_d, sum_t, nd, nt);
        goto done;
    }
    struct stat st;
    if (stat(out->codebook, &st) != 0) {
        fail(err, CHIMERA_ERR_IO, "%s: the codebook %s is missing", path, out->codebook);
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(m);
    free(path);
    if (rc) shards_free(out);
    return rc;
}

char *shards_codebook_path(const char *dir, uint64_t gen)
{
    char name[64];
    snprintf(name, sizeof name, "g%" PRIu64 "-codebook.bin", gen);
    return join(dir, name);
}

char *shards_shard_path(const char *dir, uint64_t gen, int i)
{
    char name[64];
    snprintf(name, sizeof name, "g%" PRIu64 "-shard-%03d", gen, i);
    return join(dir, name);
}

int shards_plan(const char *dir, int n_shards, shard_layout *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    if (n_shards < 1 || n_shards > SHARDS_MAX)
        return fail(err, CHIMERA_ERR_INVALID_ARG, "%d shards, expected 1..%d", n_shards, SHARDS_MAX);
    uint64_t gen = 1;
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return fail(err, CHIMERA_ERR_INVALID_ARG, "%s exists and is not a directory", dir);
        if (shards_is_layout(dir)) {
            shard_layout old;
            if (shards_read(dir, &old, err)) return 1;
            gen = old.generation + 1;
            shards_free(&old);
        } else {
            DIR *d = opendir(dir);
            if (!d) return fail(err, CHIMERA_ERR_IO, "%s: cannot read (%s)", dir, strerror(errno));
            int empty = 1;
            for (struct dirent *e; (e = readdir(d));)
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
            closedir(d);
            if (!empty)
                return fail(err, CHIMERA_ERR_INVALID_ARG,
                            "%s is not empty and holds no sharded index (left untouched): give a "
                            "new directory", dir);
        }
    } else if (mkdir(dir, 0777) != 0) {
        return fail(err, CHIMERA_ERR_IO, "%s: cannot create (%s)", dir, strerror(errno));
    }
    /* one writer at a time: the lock is held until shards_free */
    char *lock = join(dir, ".shards-lock");
    int fd = lock ? open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666) : -1;
    free(lock);
    if (fd < 0) return fail(err, CHIMERA_ERR_IO, "%s: cannot create its lock file (%s)", dir,
                            strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return fail(err, CHIMERA_ERR_BUSY, "%s: another build is writing it", dir);
    }
    out->lock_fd = fd;
    out->generation = gen;
    out->n_shards = n_shards;
    out->shards = calloc((size_t)n_shards, sizeof *out->shards);
    out->codebook = shards_codebook_path(dir, gen);
    if (!out->shards || !out->codebook) {
        shards_free(out);
        return fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_shards; i++) {
        if (!(out->shards[i].dir = shards_shard_path(dir, gen, i))) {
            shards_free(out);
            return fail(err, CHIMERA_ERR_NOMEM, "out of memory");
        }
    }
    return 0;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Removes what older generations (and interrupted writes) left in dir, or with
 * only_gen, what generation `gen` wrote. */
static void remove_files(const char *dir, uint64_t gen, int only_gen)
{
    DIR *d = opendir(dir);
    if (!d) return;
    char keep[32];
    snprintf(keep, sizeof keep, "g%" PRIu64 "-", gen);
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        int ours = n[0] == 'g' && n[1] >= '0' && n[1] <= '9' && strchr(n, '-');
        int tmp = strstr(n, ".tmp") != NULL;
        if (!ours && !(tmp && strncmp(n, SHARDS_MANIFEST, strlen(SHARDS_MANIFEST)) == 0)) continue;
        int this_gen = ours && strncmp(n, keep, strlen(keep)) == 0;
        if (only_gen ? !this_gen : this_gen && !tmp) continue;
        char *p = join(dir, n);
        if (p) nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(p);
    }
    closedir(d);
}

void shards_abandon(const char *dir, const shard_layout *l)
{
    remove_files(dir, l->generation, 1);
}

static int fsync_path(const char *path, int flags)
{
    int fd = open(path, flags);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

int shards_commit(const char *dir, const shard_layout *l, chimera_error *err)
{
    cJSON *m = cJSON_CreateObject(), *list = NULL;
    char seed[32];
    snprintf(seed, sizeof seed, "%" PRIu64, l->seed);
    if (!m || !cJSON_AddStringToObject(m, "format", "chimera-shards 1") ||
        !cJSON_AddNumberToObject(m, "generation", (double)l->generation) ||
        !cJSON_AddNumberToObject(m, "dim", l->dim) ||
        !cJSON_AddNumberToObject(m, "n_clusters", l->n_clusters) ||
        !cJSON_AddStringToObject(m, "seed", seed) ||
        !cJSON_AddNumberToObject(m, "n_docs", (double)l->n_docs) ||
        !cJSON_AddNumberToObject(m, "n_tokens", (double)l->n_tokens) ||
        !cJSON_AddStringToObject(m, "codebook", base_name(l->codebook)) ||
        !(list = cJSON_AddArrayToObject(m, "shards"))) {
        cJSON_Delete(m);
        return fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < l->n_shards; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!e || !cJSON_AddItemToArray(list, e) ||
            !cJSON_AddStringToObject(e, "dir", base_name(l->shards[i].dir)) ||
            !cJSON_AddNumberToObject(e, "first_doc", (double)l->shards[i].first_doc) ||
            !cJSON_AddNumberToObject(e, "n_docs", (double)l->shards[i].n_docs) ||
            !cJSON_AddNumberToObject(e, "n_tokens", (double)l->shards[i].n_tokens)) {
            cJSON_Delete(m);
            return fail(err, CHIMERA_ERR_NOMEM, "out of memory");
        }
    }
    char *text = cJSON_Print(m);
    cJSON_Delete(m);
    char *final = join(dir, SHARDS_MANIFEST);
    size_t tn = strlen(dir) + 64;
    char *tmp = malloc(tn);
    if (!text || !final || !tmp) {
        free(text), free(final), free(tmp);
        return fail(err, CHIMERA_ERR_NOMEM, "out of memory");
    }
    snprintf(tmp, tn, "%s/%s.tmp-%ld", dir, SHARDS_MANIFEST, (long)getpid());
    int rc = 0;
    FILE *f = fopen(tmp, "wb");
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rc = fail(err, CHIMERA_ERR_IO, "%s: cannot write (%s)", tmp, strerror(errno));
        if (f) fclose(f);
        remove(tmp);
    } else if (fclose(f) != 0 || rename(tmp, final) != 0 || fsync_path(dir, O_RDONLY) != 0) {
        rc = fail(err, CHIMERA_ERR_IO, "%s: cannot commit (%s)", final, strerror(errno));
        remove(tmp);
    }
    if (!rc) remove_files(dir, l->generation, 0);
    free(text), free(final), free(tmp);
    return rc;
}

void shards_split(const chimera_corpus *c, int n, int64_t *bounds)
{
    const int64_t nd = chimera_corpus_n_docs(c), nt = chimera_corpus_n_tokens(c);
    bounds[0] = 0;
    int64_t d = 0;
    for (int i = 1; i < n; i++) {
        /* the first document starting at or after i/n of the tokens, leaving at least
         * one document for every part before and after */
        int64_t target = (int64_t)((double)nt * i / n);
        if (d < bounds[i - 1] + 1) d = bounds[i - 1] + 1;
        while (d < nd - (n - i) && chimera_corpus_doc_start(c, d) < target) d++;
        bounds[i] = d;
    }
    bounds[n] = nd;
}

int shards_merge_all(int n_lists, int64_t n, uint32_t k, const int64_t *ids, const float *scores,
                     int64_t *out_ids, float *out_scores)
{
    int64_t *gi = malloc((size_t)n_lists * k * sizeof *gi);
    float *gs = malloc((size_t)n_lists * k * sizeof *gs);
    if (!gi || !gs) {
        free(gi), free(gs);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        for (int l = 0; l < n_lists; l++) {
            memcpy(gi + (size_t)l * k, ids + ((size_t)l * n + i) * k, k * sizeof *gi);
            memcpy(gs + (size_t)l * k, scores + ((size_t)l * n + i) * k, k * sizeof *gs);
        }
        shards_merge(n_lists, k, gi, gs, out_ids + (size_t)i * k, out_scores + (size_t)i * k);
    }
    free(gi), free(gs);
    return 0;
}

void shards_merge(int n_lists, uint32_t k, const int64_t *ids, const float *scores,
                  int64_t *out_ids, float *out_scores)
{
    /* k-way merge of sorted lists: n_lists is small (shards), so a linear scan of the
     * heads per output is as fast as a heap and simpler */
    uint32_t head[SHARDS_MAX];
    for (int l = 0; l < n_lists; l++) head[l] = 0;
    for (uint32_t r = 0; r < k; r++) {
        int best = -1;
        for (int l = 0; l < n_lists; l++) {
            if (head[l] >= k) continue;
            size_t j = (size_t)l * k + head[l];
            if (ids[j] < 0) continue;
            if (best < 0) {
                best = l;
                continue;
            }
            size_t b = (size_t)best * k + head[best];
            if (scores[j] > scores[b] || (scores[j] == scores[b] && ids[j] < ids[b])) best = l;
        }
        if (best < 0) {
            out_ids[r] = -1;
            out_scores[r] = -INFINITY;
            continue;
        }
        size_t b = (size_t)best * k + head[best]++;
        out_ids[r] = ids[b];
        out_scores[r] = scores[b];
    }
}
