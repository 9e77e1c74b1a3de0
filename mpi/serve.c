/* chimera-mpi serve DIR: the HTTP/JSON service of `chimera serve` (server/) on rank 0,
 * over a sharded index whose shards the ranks hold (shard s on rank s mod ranks).
 *
 * Rank 0's batcher and writer threads reach the shards through a srv_remote (server.h):
 * each search batch or write becomes one command broadcast to every rank, one at a time
 * (a mutex; MPI runs with MPI_THREAD_SERIALIZED). The other ranks wait for commands.
 *
 *   search  the batch's query tokens (and per-query id filters, each distinct filter
 *           sent once) go to every rank; each searches its shards to a local top k;
 *           rank 0 gathers and merges, as chimera-mpi search does.
 *   write   the documents (or ids) go to every rank; every rank looks up which of the
 *           ids its shards hold, and the locations are combined (MPI_Allreduce, max), so
 *           that every rank takes the same decision: an add of an id held anywhere is a
 *           conflict; an update replaces a document in the shard that holds it; a new
 *           document goes to shard hash(id) mod shards (splitmix64, docs/format.md,
 *           "Sharded indexes"); a delete acts where the id is. Then each rank commits
 *           its shards' part (one atomic commit per shard; a write that spans shards is
 *           atomic per shard, and if one shard fails the answer says which committed).
 *
 * Failures (mpi.h): a rank that stalls makes the command's wait run out (--shard-timeout,
 * default 30 s): the request is answered 503 naming the cause, and so is every later one,
 * since MPI cannot finish the command without that rank; the operator restarts the job.
 * A rank that dies makes mpirun end the whole job. Adds are refused with metadata, and
 * metadata filters with 422 (server/request.c): the shards keep no metadata. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi.h"
#include "server.h"
#include "../tools/shards.h"

enum { CMD_SEARCH = 1, CMD_WRITE = 2, CMD_STOP = 3 };

/* What rank 0 broadcasts first for every command. */
typedef struct cmd_hdr {
    int32_t kind, wkind, missing_ok, latency;
    uint32_t k;
    int32_t n_filters;    /* search: distinct filters (0: none) */
    int64_t n;            /* queries, documents or ids */
    int64_t total;        /* query or document tokens */
    int64_t n_filter_ids; /* search: ids of all distinct filters */
    chimera_search_params params;
} cmd_hdr;

typedef struct serve_state {
    shard_set set;
    uint32_t dim;
    int search_threads;
    int64_t **live;        /* per opened shard: its live ids, sorted */
    int64_t *n_live;
    /* rank 0 */
    pthread_mutex_t mu;    /* one command at a time */
    atomic_int broken;     /* a command timed out: MPI cannot continue */
    _Atomic int64_t n_docs;
    _Atomic uint64_t generation;
    double timeout;
} serve_state;

static serve_state S;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* splitmix64: where a new document goes (stable: part of the layout's contract) */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int home_shard(int64_t id, int n_shards) { return (int)(mix((uint64_t)id) % (uint64_t)n_shards); }

/* Reloads opened shard j's live ids (after its open or its commit). */
static int load_live(int j, chimera_error *err)
{
    int64_t n = chimera_index_ids(S.set.ix[j], NULL, 0);
    int64_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (!ids) {
        err->code = CHIMERA_ERR_NOMEM;
        strcpy(err->msg, "out of memory");
        return 0;
    }
    chimera_index_ids(S.set.ix[j], ids, n);
    qsort(ids, (size_t)n, sizeof *ids, cmp_i64);
    free(S.live[j]);
    S.live[j] = ids;
    S.n_live[j] = n;
    return 1;
}

static int holds(int j, int64_t id)
{
    return bsearch(&id, S.live[j], (size_t)S.n_live[j], sizeof id, cmp_i64) != NULL;
}

/* ---- waits that fail a request instead of the job -------------------------------------- */

/* The answer once a command has timed out. */
static void broken_msg(chimera_error *err, const char *what)
{
    err->code = CHIMERA_ERR_BUSY;
    snprintf(err->msg, sizeof err->msg,
             "the shard processes did not finish %s within %.0f s: one died or stalls. MPI cannot "
             "go on without it, so this service answers 503 from now on: restart it (mpirun ... "
             "chimera-mpi serve); the index on disk is intact", what, S.timeout);
}

static int wait_req(MPI_Request *req, chimera_error *err, const char *what)
{
    if (mpi_wait_for(req, mpi_world.rank == 0 ? S.timeout : INFINITY)) return 1;
    atomic_store(&S.broken, 1);
    broken_msg(err, what);
    return 0;
}

/* A shard rank that cannot take part in a command would leave the others waiting on
 * it: it ends the job instead, saying why. */
static void shard_rank_fail(const char *what)
{
    fprintf(stderr, "chimera-mpi serve: rank %d: %s; ending the job\n", mpi_world.rank, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int bcast(void *buf, size_t n, chimera_error *err, const char *what)
{
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < n; off += piece) {
        size_t m = n - off < piece ? n - off : piece;
        MPI_Request req;
        MPI_Ibcast((char *)buf + off, (int)m, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        if (!wait_req(&req, err, what)) return 0;
    }
    return 1;
}

/* Every rank: 1 when all ranks succeeded, else 0 everywhere with the first failing
 * rank's message in err (prefixed with its rank). */
static int agree(int ok, chimera_error *err)
{
    int mine = ok ? mpi_world.size : mpi_world.rank, first = mpi_world.size;
    MPI_Request req;
    MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
    chimera_error e2 = {0};
    if (!wait_req(&req, err ? err : &e2, "an agreement")) return 0;
    if (first == mpi_world.size) return 1;
    struct {
        int32_t code;
        char msg[sizeof err->msg];
    } m = {0};
    if (mpi_world.rank == first && err) {
        m.code = err->code;
        snprintf(m.msg, sizeof m.msg, "shard process %d: %.200s", first, err->msg);
    }
    MPI_Ibcast(&m, (int)sizeof m, MPI_BYTE, first, MPI_COMM_WORLD, &req);
    if (!wait_req(&req, err ? err : &e2, "an error report")) return 0;
    if (err) {
        err->code = m.code ? (chimera_status)m.code : CHIMERA_ERR_INTERNAL;
        memcpy(err->msg, m.msg, sizeof err->msg);
    }
    return 0;
}

/* Rank 0 learns the totals of what is served (documents, sum of generations). */
static int refresh_totals(chimera_error *err)
{
    double mine[2] = {0, 0}, all[2] = {0, 0};
    for (int j = 0; j < S.set.n_open; j++) {
        mine[0] += (double)chimera_index_n_docs(S.set.ix[j]);
        mine[1] += (double)chimera_index_generation(S.set.ix[j]);
    }
    MPI_Request req;
    MPI_Ireduce(mine, all, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD, &req);
    if (!wait_req(&req, err, "the totals")) return 0;
    if (mpi_world.rank == 0) {
        atomic_store(&S.n_docs, (int64_t)all[0]);
        atomic_store(&S.generation, (uint64_t)all[1]);
    }
    return 1;
}

/* ---- search ------------------------------------------------------------------------------ */

/* Every rank, after the header: the batch, searched and merged on rank 0. */
static int do_search(const cmd_hdr *h, const float *tok0, const int64_t *qlens0,
                     const int32_t *fidx0, const int32_t *fexcl0, const int64_t *fcnt0,
                     const int64_t *fids0, int64_t *ids, float *scores, chimera_error *err)
{
    const int root = mpi_world.rank == 0, size = mpi_world.size;
    const int64_t n = h->n;
    const uint32_t k = h->k;
    int64_t *qlens = root ? (int64_t *)qlens0 : malloc((size_t)n * sizeof *qlens);
    float *tok = root ? (float *)tok0 : malloc((size_t)h->total * S.dim * sizeof *tok);
    int32_t *fidx = root ? (int32_t *)fidx0 : NULL, *fexcl = root ? (int32_t *)fexcl0 : NULL;
    int64_t *fcnt = root ? (int64_t *)fcnt0 : NULL, *fids = root ? (int64_t *)fids0 : NULL;
    int nf = h->n_filters;
    if (!root && nf) {
        fidx = malloc((size_t)n * sizeof *fidx);
        fexcl = malloc((size_t)nf * sizeof *fexcl);
        fcnt = malloc((size_t)nf * sizeof *fcnt);
        fids = malloc((size_t)(h->n_filter_ids ? h->n_filter_ids : 1) * sizeof *fids);
    }
    int ok = qlens && tok && (!nf || (fidx && fexcl && fcnt && fids));
    if (!ok && !root) shard_rank_fail("out of memory for a search batch");
    if (ok) ok = bcast(qlens, (size_t)n * sizeof *qlens, err, "a search") &&
                 bcast(tok, (size_t)h->total * S.dim * sizeof *tok, err, "a search");
    if (ok && nf)
        ok = bcast(fidx, (size_t)n * sizeof *fidx, err, "a search") &&
             bcast(fexcl, (size_t)nf * sizeof *fexcl, err, "a search") &&
             bcast(fcnt, (size_t)nf * sizeof *fcnt, err, "a search") &&
             bcast(fids, (size_t)h->n_filter_ids * sizeof *fids, err, "a search");
    if (atomic_load(&S.broken)) return 0;
    chimera_filter **filters = NULL, **qf = NULL;
    chimera_queries *q = NULL;
    int64_t *mine_ids = malloc((size_t)n * k * sizeof *mine_ids);
    float *mine_sc = malloc((size_t)n * k * sizeof *mine_sc);
    if (ok && (!mine_ids || !mine_sc)) ok = 0, err->code = CHIMERA_ERR_NOMEM, strcpy(err->msg, "out of memory");
    if (ok && nf) {
        filters = calloc((size_t)nf, sizeof *filters);
        qf = calloc((size_t)n, sizeof *qf);
        ok = filters && qf;
        int64_t off = 0;
        for (int f = 0; ok && f < nf; off += fcnt[f], f++)
            ok = chimera_filter_new(fids + off, fcnt[f], fexcl[f], &filters[f], err) == CHIMERA_OK;
        for (int64_t i = 0; ok && i < n; i++) qf[i] = fidx[i] >= 0 ? filters[fidx[i]] : NULL;
    }
    if (ok) ok = chimera_queries_new(tok, n, S.dim, qlens, 0, &q, err) == CHIMERA_OK;
    chimera_search_opts so = {.n_threads = S.search_threads, .latency_mode = h->latency,
                              .query_filters = (const chimera_filter *const *)qf};
    if (ok)
        ok = shard_set_search(&S.set, q, k, &h->params, &so, mine_ids, mine_sc, NULL, err) ==
             CHIMERA_OK;
    chimera_queries_free(q);
    for (int f = 0; filters && f < nf; f++) chimera_filter_free(filters[f]);
    free(filters), free(qf);
    if (!root) {
        free(qlens), free(tok), free(fidx), free(fexcl), free(fcnt), free(fids);
    }
    int64_t *all_ids = NULL;
    float *all_sc = NULL;
    if (agree(ok, err)) {
        if (root) {
            all_ids = malloc((size_t)size * n * k * sizeof *all_ids);
            all_sc = malloc((size_t)size * n * k * sizeof *all_sc);
        }
        /* gather into scratch even when out of memory, so no rank waits forever */
        MPI_Request req[2];
        MPI_Igather(mine_ids, (int)(n * k), MPI_INT64_T, all_ids, (int)(n * k), MPI_INT64_T, 0,
                    MPI_COMM_WORLD, &req[0]);
        MPI_Igather(mine_sc, (int)(n * k), MPI_FLOAT, all_sc, (int)(n * k), MPI_FLOAT, 0,
                    MPI_COMM_WORLD, &req[1]);
        ok = wait_req(&req[0], err, "a search") && wait_req(&req[1], err, "a search");
        if (ok && root && (!all_ids || !all_sc ||
                           shards_merge_all(size, n, k, all_ids, all_sc, ids, scores) != 0)) {
            ok = 0;
            err->code = CHIMERA_ERR_NOMEM;
            strcpy(err->msg, "out of memory");
        }
    } else {
        ok = 0;
    }
    free(mine_ids), free(mine_sc), free(all_ids), free(all_sc);
    return ok;
}

/* rank 0, in the batcher thread */
static chimera_status remote_search(void *user, const chimera_queries *q, uint32_t k,
                                    const chimera_search_params *p, const chimera_search_opts *so,
                                    int64_t *ids, float *scores, chimera_search_profile *prof,
                                    chimera_error *err)
{
    (void)user;
    const int64_t n = chimera_queries_count(q);
    double t0 = MPI_Wtime();
    if (atomic_load(&S.broken)) {
        broken_msg(err, "an earlier command");
        return CHIMERA_ERR_BUSY;
    }
    cmd_hdr h = {.kind = CMD_SEARCH, .k = k, .n = n, .latency = so->latency_mode};
    if (p) h.params = *p;
    int64_t *qlens = malloc((size_t)(n ? n : 1) * sizeof *qlens);
    int32_t *fidx = NULL, *fexcl = NULL;
    int64_t *fcnt = NULL, *fids = NULL;
    const chimera_filter **distinct = NULL;
    if (!qlens) goto nomem;
    for (int64_t i = 0; i < n; i++) qlens[i] = chimera_queries_len(q, i), h.total += qlens[i];
    if (so->query_filters) {
        /* each distinct filter once; query i points at its entry (-1: none) */
        fidx = malloc((size_t)n * sizeof *fidx);
        distinct = malloc((size_t)n * sizeof *distinct);
        if (!fidx || !distinct) goto nomem;
        for (int64_t i = 0; i < n; i++) {
            const chimera_filter *f = so->query_filters[i];
            fidx[i] = -1;
            if (!f) continue;
            for (int d = 0; d < h.n_filters && fidx[i] < 0; d++)
                if (distinct[d] == f) fidx[i] = d;
            if (fidx[i] < 0) distinct[fidx[i] = h.n_filters++] = f;
        }
        fexcl = malloc((size_t)(h.n_filters ? h.n_filters : 1) * sizeof *fexcl);
        fcnt = malloc((size_t)(h.n_filters ? h.n_filters : 1) * sizeof *fcnt);
        if (!fexcl || !fcnt) goto nomem;
        for (int d = 0; d < h.n_filters; d++) {
            int ex = 0;
            fcnt[d] = chimera_filter_ids(distinct[d], NULL, 0, &ex);
            fexcl[d] = ex;
            h.n_filter_ids += fcnt[d];
        }
        fids = malloc((size_t)(h.n_filter_ids ? h.n_filter_ids : 1) * sizeof *fids);
        if (!fids) goto nomem;
        int64_t off = 0;
        for (int d = 0; d < h.n_filters; d++)
            off += chimera_filter_ids(distinct[d], fids + off, fcnt[d], NULL);
    }
    pthread_mutex_lock(&S.mu);
    int ok = bcast(&h, sizeof h, err, "a search") &&
             do_search(&h, chimera_queries_tokens(q, 0), qlens, fidx, fexcl, fcnt, fids, ids,
                       scores, err);
    pthread_mutex_unlock(&S.mu);
    free(qlens), free(fidx), free(fexcl), free(fcnt), free(fids), free(distinct);
    if (prof) {
        memset(prof, 0, sizeof *prof);
        prof->seconds = MPI_Wtime() - t0;
        snprintf(prof->backend, sizeof prof->backend, "mpi");
    }
    return ok ? CHIMERA_OK : err->code ? err->code : CHIMERA_ERR_INTERNAL;
nomem:
    free(qlens), free(fidx), free(fexcl), free(fcnt), free(fids), free(distinct);
    err->code = CHIMERA_ERR_NOMEM;
    strcpy(err->msg, "out of memory");
    return CHIMERA_ERR_NOMEM;
}

/* ---- write ------------------------------------------------------------------------------- */

/* Every rank, after the header: one write, decided alike everywhere, committed per shard.
 * rep is filled on rank 0. */
static int do_write(const cmd_hdr *h, const int64_t *ids0, const int64_t *lens0,
                    const float *tok0, chimera_update_report *rep, chimera_error *err)
{
    const int root = mpi_world.rank == 0;
    const int64_t n = h->n;
    const int docs = h->wkind != SRV_WRITE_DELETE;
    const int ns = S.set.layout.n_shards;
    int64_t *ids = root ? (int64_t *)ids0 : malloc((size_t)(n ? n : 1) * sizeof *ids);
    int64_t *lens = root || !docs ? (int64_t *)lens0 : malloc((size_t)(n ? n : 1) * sizeof *lens);
    float *tok = root || !docs ? (float *)tok0 : malloc((size_t)(h->total ? h->total : 1) * S.dim * sizeof *tok);
    int32_t *where = malloc((size_t)(n ? n : 1) * sizeof *where);
    int ok = ids && where && (!docs || (lens && tok));
    if (!ok && !root) shard_rank_fail("out of memory for a write");
    if (ok) ok = bcast(ids, (size_t)n * sizeof *ids, err, "a write");
    if (ok && docs)
        ok = bcast(lens, (size_t)n * sizeof *lens, err, "a write") &&
             bcast(tok, (size_t)h->total * S.dim * sizeof *tok, err, "a write");
    if (atomic_load(&S.broken)) goto out;
    /* where each id lives now (-1: nowhere), combined over the ranks */
    for (int64_t i = 0; ok && i < n; i++) {
        where[i] = -1;
        for (int j = 0; j < S.set.n_open; j++)
            if (holds(j, ids[i])) where[i] = S.set.which[j];
    }
    if (!agree(ok, err)) {
        ok = 0;
        goto out;
    }
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, where, (int)n, MPI_INT32_T, MPI_MAX, MPI_COMM_WORLD, &req);
    if (!(ok = wait_req(&req, err, "a write"))) goto out;
    /* the decision, the same on every rank: the target shard of each id */
    int64_t missing = 0;
    for (int64_t i = 0; i < n; i++) {
        if (h->wkind == SRV_WRITE_ADD && where[i] >= 0) {
            err->code = CHIMERA_ERR_CONFLICT;
            snprintf(err->msg, sizeof err->msg, "id %lld is already in the index (shard %d); "
                     "update it instead", (long long)ids[i], where[i]);
            ok = 0;
            break;
        }
        if (where[i] < 0) {
            if (h->wkind != SRV_WRITE_ADD && !h->missing_ok) {
                err->code = CHIMERA_ERR_INVALID_ARG;
                snprintf(err->msg, sizeof err->msg, "id %lld is not in the index (missing_ok "
                         "skips or adds such ids)", (long long)ids[i]);
                ok = 0;
                break;
            }
            if (h->wkind != SRV_WRITE_ADD) missing++;
            where[i] = h->wkind == SRV_WRITE_DELETE ? -1 : home_shard(ids[i], ns);
        }
    }
    if (!ok) goto out; /* every rank decided the same: no agreement needed */
    /* this rank's shards: their documents (or ids), one commit each */
    int64_t *sel_ids = malloc((size_t)(n ? n : 1) * sizeof *sel_ids);
    int64_t *sel_lens = docs ? malloc((size_t)(n ? n : 1) * sizeof *sel_lens) : NULL;
    float *sel_tok = docs ? malloc((size_t)(h->total ? h->total : 1) * S.dim * sizeof *sel_tok) : NULL;
    int64_t *off = docs ? malloc(((size_t)n + 1) * sizeof *off) : NULL;
    double deleted = 0;
    ok = sel_ids && (!docs || (sel_lens && sel_tok && off));
    if (ok && docs) {
        off[0] = 0;
        for (int64_t i = 0; i < n; i++) off[i + 1] = off[i] + lens[i];
    }
    for (int j = 0; ok && j < S.set.n_open; j++) {
        int s = S.set.which[j];
        int64_t m = 0, t = 0;
        for (int64_t i = 0; i < n; i++) {
            if (where[i] != s) continue;
            sel_ids[m] = ids[i];
            if (docs) {
                sel_lens[m] = lens[i];
                memcpy(sel_tok + (size_t)t * S.dim, tok + (size_t)off[i] * S.dim,
                       (size_t)lens[i] * S.dim * sizeof *tok);
                t += lens[i];
            }
            m++;
        }
        if (m == 0) continue;
        chimera_update_opts uo = {.missing_ok = h->missing_ok, .n_threads = S.search_threads};
        chimera_update_report r = {0};
        const char *dir = S.set.layout.shards[s].dir;
        if (docs) {
            chimera_corpus *c = NULL;
            ok = chimera_corpus_wrap(sel_tok, t, S.dim, sel_lens, m, sel_ids, NULL, &c, err) ==
                 CHIMERA_OK;
            if (ok)
                ok = (h->wkind == SRV_WRITE_ADD ? chimera_index_add(dir, c, &uo, &r, err)
                                                : chimera_index_update(dir, c, &uo, &r, err)) ==
                     CHIMERA_OK;
            chimera_corpus_close(c);
        } else {
            ok = chimera_index_delete(dir, sel_ids, m, &uo, &r, err) == CHIMERA_OK;
        }
        if (ok) ok = chimera_index_refresh(S.set.ix[j], NULL, err) == CHIMERA_OK && load_live(j, err);
        if (!ok) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "shard %d: %.220s", s, err->msg);
            memcpy(err->msg, msg, sizeof msg);
        }
        deleted += (double)r.docs_deleted;
    }
    free(sel_ids), free(sel_lens), free(sel_tok), free(off);
    /* a failure after another shard committed: the answer says a part may be committed */
    if (!agree(ok, err)) {
        ok = 0;
        size_t l = strlen(err->msg);
        snprintf(err->msg + l, sizeof err->msg - l, " (a write spanning shards is atomic per "
                 "shard: the other shards' part may be committed)");
        goto out;
    }
    double all_deleted = 0;
    MPI_Ireduce(&deleted, &all_deleted, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD, &req);
    ok = wait_req(&req, err, "a write") && refresh_totals(err);
    if (ok && root) {
        memset(rep, 0, sizeof *rep);
        rep->docs_added = docs ? n : 0;
        rep->docs_deleted = (int64_t)all_deleted;
        rep->ids_missing = missing;
        rep->generation = atomic_load(&S.generation);
        rep->n_docs = atomic_load(&S.n_docs);
    }
out:
    if (!root) {
        free(ids);
        if (docs) free(lens), free(tok);
    }
    free(where);
    return ok;
}

/* rank 0, in the writer thread */
static chimera_status remote_commit(void *user, const srv_write *w, chimera_update_report *rep,
                                    chimera_error *err)
{
    (void)user;
    if (atomic_load(&S.broken)) {
        broken_msg(err, "an earlier command");
        return CHIMERA_ERR_BUSY;
    }
    double t0 = MPI_Wtime();
    cmd_hdr h = {.kind = CMD_WRITE, .wkind = (int32_t)w->kind, .missing_ok = w->missing_ok,
                 .n = w->n_docs, .total = w->n_tokens};
    pthread_mutex_lock(&S.mu);
    int ok = bcast(&h, sizeof h, err, "a write") &&
             do_write(&h, w->ids, w->doclens, w->tokens, rep, err);
    pthread_mutex_unlock(&S.mu);
    if (ok) rep->seconds = MPI_Wtime() - t0;
    return ok ? CHIMERA_OK : err->code ? err->code : CHIMERA_ERR_INTERNAL;
}

static int remote_healthy(void *user)
{
    (void)user;
    return !atomic_load(&S.broken);
}

static int64_t remote_n_docs(void *user)
{
    (void)user;
    return atomic_load(&S.n_docs);
}

static uint64_t remote_generation(void *user)
{
    (void)user;
    return atomic_load(&S.generation);
}

/* ---- the command ------------------------------------------------------------------------- */

/* The other ranks: answer commands until rank 0 says stop. */
static void serve_commands(void)
{
    for (;;) {
        cmd_hdr h;
        MPI_Request req;
        MPI_Ibcast(&h, (int)sizeof h, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        mpi_wait_for(&req, INFINITY); /* idle: rank 0 waits for clients */
        chimera_error err = {0};
        if (h.kind == CMD_STOP) return;
        if (h.kind == CMD_SEARCH) do_search(&h, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &err);
        else if (h.kind == CMD_WRITE) do_write(&h, NULL, NULL, NULL, NULL, &err);
    }
}

int mpi_cmd_serve(int argc, char **argv)
{
    static srv_server srv_storage; /* big (metrics) */
    srv_server *srv = &srv_storage;
    const int rank = mpi_world.rank;
    srv_init(srv);
    srv->prog = "chimera-mpi serve";
    /* DIR, --name and --shard-timeout are this command's; the rest are chimera serve's */
    const char *dir = NULL, *name = NULL;
    S.timeout = 30;
    char **rest = malloc((size_t)(argc + 1) * sizeof *rest);
    int nr = 0;
    if (!rest) return 1;
    for (int i = 0; i < argc; i++) {
        if (i < 2) rest[nr++] = argv[i];
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) name = argv[++i];
        else if (strcmp(argv[i], "--shard-timeout") == 0 && i + 1 < argc) S.timeout = atof(argv[++i]);
        else if (argv[i][0] != '-' && !dir && (i == 2 || argv[i - 1][0] != '-' ||
                                                strcmp(argv[i - 1], "--quiet") == 0))
            dir = argv[i];
        else rest[nr++] = argv[i];
    }
    double drain_s = 30;
    int code = 2;
    srv_block_signals();
    /* mpirun passes SIGTERM to every rank: the shard ranks leave it to rank 0, which
     * drains the requests in flight and then tells them to stop */
    if (rank != 0) signal(SIGTERM, SIG_IGN), signal(SIGINT, SIG_IGN);
    int r = srv_parse_args(srv, nr, rest, 2, 0, &drain_s, &code);
    free(rest);
    if (r || !dir || !(S.timeout > 0)) {
        if (!r && rank == 0)
            fprintf(stderr, "usage: mpirun -n N chimera-mpi serve DIR [--name NAME] [--shard-timeout "
                            "S (default 30)] [chimera serve's options but --index]\n");
        srv_close(srv);
        return r < 0 ? 0 : code;
    }
    if (!name) {
        const char *b = strrchr(dir, '/');
        name = b && b[1] ? b + 1 : dir;
    }
    mpi_world.timeout = S.timeout;
    pthread_mutex_init(&S.mu, NULL);
    S.search_threads = srv->cfg.search_threads;
    chimera_error err = {0};
    int ok = !shard_set_open(dir, mpi_world.size, rank, &S.set, &err);
    if (ok) {
        S.dim = S.set.layout.dim;
        S.live = calloc((size_t)S.set.layout.n_shards, sizeof *S.live);
        S.n_live = calloc((size_t)S.set.layout.n_shards, sizeof *S.n_live);
        ok = S.live && S.n_live;
        for (int j = 0; ok && j < S.set.n_open; j++) ok = load_live(j, &err);
    }
    if (ok && strlen(name) >= SRV_NAME_MAX) {
        ok = 0;
        snprintf(err.msg, sizeof err.msg, "--name %s: at most %d characters", name, SRV_NAME_MAX - 1);
    }
    int rc = 1, ran = 0;
    if (mpi_world.threads < MPI_THREAD_SERIALIZED) {
        ok = 0;
        snprintf(err.msg, sizeof err.msg, "this MPI library does not let threads other than the "
                 "main one call it (MPI_THREAD_SERIALIZED); the service needs that");
    }
    if (!mpi_agree("serve", ok, &err) || !refresh_totals(&err)) goto done;
    if (rank != 0) {
        serve_commands();
        rc = 0;
        goto done;
    }
    static srv_remote remote;
    remote = (srv_remote){.user = &S, .search = remote_search, .commit = remote_commit,
                          .n_docs = remote_n_docs, .generation = remote_generation,
                          .healthy = remote_healthy,
                          .kind = "sharded", .n_shards = S.set.layout.n_shards};
    srv_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->dir = strdup(dir))) {
        free(ix);
        fprintf(stderr, "chimera-mpi serve: out of memory\n");
    } else {
        snprintf(ix->name, sizeof ix->name, "%s", name);
        ix->remote = &remote;
        ix->dim = S.dim;
        ix->srv = srv;
        srv->indexes[srv->n_indexes++] = ix;
        printf("chimera-mpi serve: %s as '%s': %d shards on %d ranks, %lld documents\n", dir,
               ix->name, S.set.layout.n_shards, mpi_world.size, (long long)atomic_load(&S.n_docs));
        ran = 1;
        rc = srv_run(srv, drain_s, "chimera-mpi serve");
    }
    /* the shard ranks stop with rank 0, unless a command is stuck (then only an abort ends
     * the job: MPI cannot finish the stuck collective) */
    if (atomic_load(&S.broken)) {
        fprintf(stderr, "chimera-mpi serve: a shard process was lost; ending the job\n");
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    cmd_hdr stop = {.kind = CMD_STOP};
    MPI_Request req;
    MPI_Ibcast(&stop, (int)sizeof stop, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "stop");
done:
    for (int j = 0; S.live && j < S.set.layout.n_shards; j++) free(S.live[j]);
    free(S.live), free(S.n_live);
    shard_set_close(&S.set);
    if (!ran) srv_close(srv);
    return rc;
}
