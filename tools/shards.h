/* A sharded index: a directory of shard indexes that share one codebook (chimera.h,
 * "Shards"), with a manifest, shards.json, that lists them (docs/format.md, "Sharded
 * indexes"). Used by `chimera build --shards N`, `chimera search` and `chimera-mpi`
 * (mpi/), on the public API only.
 *
 *   DIR/shards.json           the manifest: written last, atomically; what it lists is
 *                             complete and synced before it is written
 *   DIR/g<G>-codebook.bin     the shared codebook of generation G
 *   DIR/g<G>-shard-<i>/       shard i of generation G: an ordinary index
 *
 * A rebuild writes generation G + 1 beside G, swaps the manifest, and only then removes
 * G's files, so a crash at any moment leaves the old or the new layout whole. */
#ifndef CHIMERA_TOOLS_SHARDS_H
#define CHIMERA_TOOLS_SHARDS_H

#include <stdint.h>

#include "chimera.h"

#define SHARDS_MANIFEST "shards.json"
#define SHARDS_MAX 4096

typedef struct shard_entry {
    char *dir;          /* the shard's directory (the manifest's name joined to DIR) */
    int64_t first_doc;  /* its first document's row in the corpus it was cut from */
    int64_t n_docs, n_tokens;
} shard_entry;

typedef struct shard_layout {
    uint64_t generation;
    int n_shards;
    uint32_t dim, n_clusters;
    uint64_t seed;
    int64_t n_docs, n_tokens;
    char *codebook;     /* path of the codebook file */
    shard_entry *shards;
    int lock_fd;        /* shards_plan: the writer lock on DIR (> 0), released by shards_free */
} shard_layout;

/* 1 when DIR holds a shards manifest. */
int shards_is_layout(const char *dir);

/* Reads and checks DIR's manifest (every listed shard and the codebook exist).
 * Returns 0, or 1 with the reason in err. */
int shards_read(const char *dir, shard_layout *out, chimera_error *err);
void shards_free(shard_layout *l);

/* The next generation's names under DIR (generation = the current manifest's + 1, or
 * 1): codebook path and shard i's directory. Refuses (1, err) a DIR that is an index or
 * a non-empty directory without a manifest, so that no user data is overwritten. */
int shards_plan(const char *dir, int n_shards, shard_layout *out, chimera_error *err);

/* The names of generation gen under DIR (malloc'd): the codebook, shard i's directory. */
char *shards_codebook_path(const char *dir, uint64_t gen);
char *shards_shard_path(const char *dir, uint64_t gen, int i);

/* Removes what a failed build of the planned layout l wrote (its generation's files),
 * leaving the committed layout as it was. */
void shards_abandon(const char *dir, const shard_layout *l);

/* Writes the manifest of l into DIR atomically (temporary file, fsync, rename, fsync
 * of DIR), then removes the files of older generations. 0, or 1 with err. */
int shards_commit(const char *dir, const shard_layout *l, chimera_error *err);

/* Splits documents into n parts balanced by tokens: part i is documents
 * [bounds[i], bounds[i + 1]) (n + 1 bounds); every part gets at least one document
 * (needs n <= n_docs). */
void shards_split(const chimera_corpus *c, int n, int64_t *bounds);

/* Merges n_lists top-k lists of one query (ids[l*k + r], scores[l*k + r], padded with
 * -1) into the best k, best first (ties: the smaller id first), padded the same way. */
void shards_merge(int n_lists, uint32_t k, const int64_t *ids, const float *scores,
                  int64_t *out_ids, float *out_scores);

/* The same for n queries whose lists lie list-major, as a gather of every rank's (or a
 * search of every shard's) results leaves them: list l's query i at [(l * n + i) * k].
 * Returns 0, or -1 when out of memory. */
int shards_merge_all(int n_lists, int64_t n, uint32_t k, const int64_t *ids, const float *scores,
                     int64_t *out_ids, float *out_scores);

/* The shards of a layout, opened, searched as one index: each in turn with all the
 * threads given, their top-k lists merged (shards_merge). */
typedef struct shard_set {
    shard_layout layout;
    int n_open;            /* shards opened (all, or those shard_set_open was given) */
    int *which;            /* their numbers in the layout */
    chimera_index **ix;
} shard_set;

/* Opens the shards of DIR whose number s satisfies s % stride == offset (stride 1,
 * offset 0: all). A set may hold none (more processes than shards). 0, or 1 with err. */
int shard_set_open(const char *dir, int stride, int offset, shard_set *set, chimera_error *err);

/* chimera_index_search over every opened shard, merged; profile sums their counters
 * and times (seconds: the wall time of the whole call). A set with no shard returns
 * padding (-1, -INFINITY). */
chimera_status shard_set_search(shard_set *set, const chimera_queries *q, uint32_t k,
                                const chimera_search_params *params,
                                const chimera_search_opts *opts, int64_t *ids, float *scores,
                                chimera_search_profile *profile, chimera_error *err);
void shard_set_close(shard_set *set);
/* Adds p's per-stage times and counters to t (neither seconds nor latency); t's backend
 * becomes p's where p names one. */
void shard_profile_add(chimera_search_profile *t, const chimera_search_profile *p);

#endif
