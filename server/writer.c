/* writer.c — add, update and delete requests, committed one writer per index.
 *
 * Answered after the commit is durable, not 202 with a job id. The library's changes
 * are synchronous, atomic and fsynced (chimera_index_add returns once the new manifest
 * is on disk), so a 200 here means exactly "this write survives kill -9 and power
 * loss", which is what a client needs to know before it drops its copy; a 202 would
 * only say "queued", the queue would live in this process's memory and die with it,
 * and every client would have to poll a job endpoint to learn what the 200 tells it at
 * once. Throughput is kept the way databases keep it with synchronous commits: group
 * commit. Adds that queue up while a commit runs are merged into the next one (one
 * fsync for all of them); if the merged commit fails (say one request repeats an id
 * already in the index), each is committed alone, so a request fails only for its own
 * reasons.
 *
 * One writer thread per index serialises the server's own writes; the library's writer
 * lock (IDX.lock) serialises them with other processes (chimera add on the command
 * line). Searches never wait: they run on the handle's current generation while a
 * commit is written, and the writer refreshes the handle after the commit, so searches
 * that start after the answer see the change (read-your-writes for the client). When
 * idle it refreshes once a second, so changes made by other processes are seen too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "server.h"

/* How often an idle writer looks for changes committed by other processes. */
#define REFRESH_SECONDS 1

/* At most this many add requests, and this many tokens, in one group commit. */
#define GROUP_MAX_REQUESTS 64
#define GROUP_MAX_TOKENS (4 << 20)

struct srv_writer {
    srv_index *ix;
    srv_metrics *m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_write *head, *tail;
    int stop;
    pthread_t thread;
};

/* Writes metadata JSON Lines to a temporary file for chimera_update_opts.metadata. */
static int meta_file(const char *jsonl, char *path, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, cap, "%s/chimera-serve-meta-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    size_t n = strlen(jsonl), off = 0;
    while (off < n) {
        ssize_t w = write(fd, jsonl + off, n - off);
        if (w <= 0) {
            close(fd);
            unlink(path);
            return -1;
        }
        off += (size_t)w;
    }
    close(fd);
    return 0;
}

/* Commits one write (or a merged group of adds): fills rep and err. */
static chimera_status commit(srv_writer *wr, const srv_write *w, chimera_update_report *rep,
                             chimera_error *err)
{
    srv_index *ix = wr->ix;
    if (ix->remote) return ix->remote->commit(ix->remote->user, w, rep, err);
    chimera_update_opts uo;
    chimera_update_opts_default(&uo);
    uo.missing_ok = w->missing_ok;
    uo.n_threads = ix->srv->cfg.search_threads;
    memset(rep, 0, sizeof *rep);
    if (w->kind == SRV_WRITE_DELETE) {
        if (!w->filter) return chimera_index_delete(ix->dir, w->ids, w->n_docs, &uo, rep, err);
        /* by filter: the library evaluates it under the writer lock */
        return chimera_index_delete_where(ix->dir, w->filter, (const char *const *)w->filter_args,
                                          w->n_filter_args, &uo, rep, err);
    }
    char mpath[512] = "";
    if (w->metadata_jsonl && w->metadata_jsonl[0]) {
        if (meta_file(w->metadata_jsonl, mpath, sizeof mpath)) {
            snprintf(err->msg, sizeof err->msg, "cannot write a temporary metadata file");
            return err->code = CHIMERA_ERR_IO;
        }
        uo.metadata = mpath;
    }
    chimera_corpus *docs = NULL;
    chimera_status s = chimera_corpus_wrap(w->tokens, w->n_tokens, ix->dim, w->doclens, w->n_docs,
                                           w->ids, NULL, &docs, err);
    if (s == CHIMERA_OK)
        s = w->kind == SRV_WRITE_ADD ? chimera_index_add(ix->dir, docs, &uo, rep, err)
                                     : chimera_index_update(ix->dir, docs, &uo, rep, err);
    chimera_corpus_close(docs);
    if (mpath[0]) unlink(mpath);
    return s;
}

static void answer_write(srv_writer *wr, srv_write *w, chimera_status s, const chimera_update_report *rep,
                         const chimera_error *err, int group, int refreshed)
{
    srv_answer a = {0};
    if (s == CHIMERA_OK) {
        atomic_fetch_add(&wr->m->writes, 1);
        cJSON *o = cJSON_CreateObject();
        if (o) {
            cJSON_AddStringToObject(o, "status", "committed");
            cJSON_AddNumberToObject(o, "generation", (double)rep->generation);
            if (w->kind != SRV_WRITE_DELETE) cJSON_AddNumberToObject(o, "docs_added", (double)w->n_docs);
            if (w->kind != SRV_WRITE_ADD && group == 1)
                cJSON_AddNumberToObject(o, "docs_deleted", (double)rep->docs_deleted);
            if (group == 1) cJSON_AddNumberToObject(o, "ids_missing", (double)rep->ids_missing);
            cJSON_AddNumberToObject(o, "n_docs", (double)(rep->n_docs - rep->n_deleted));
            cJSON_AddNumberToObject(o, "commit_seconds", rep->seconds);
            cJSON_AddNumberToObject(o, "group_commit", group);
            cJSON_AddBoolToObject(o, "visible", refreshed);
        }
        srv_answer_json(&a, 200, o);
    } else {
        atomic_fetch_add(&wr->m->write_errors, 1);
        srv_error e = {0};
        int status = srv_status_of(s);
        /* BUSY promises that nothing was done (clients send it again); shard processes
         * lost during a write promise nothing, and answer so */
        const srv_remote *r = wr->ix->remote;
        int lost = status == 503 && r && r->healthy && !r->healthy(r->user);
        srv_fail(&e, status, lost ? "SHARDS_LOST" : s == CHIMERA_ERR_NOMEM ? "OUT_OF_MEMORY"
                             : status == 503 ? "BUSY" : status == 409 ? "CONFLICT"
                             : status == 422 ? "WRITE_REJECTED" : "WRITE_FAILED",
                 "%s", err->msg[0] ? err->msg : chimera_status_str(s));
        srv_answer_error(&a, &e);
    }
    w->pending->answer = a;
    w->pending->done(w->pending);
}

/* After a commit: move the served handle to it, so that searches the client sends
 * after our answer see its write. */
static int refresh(srv_writer *wr)
{
    chimera_error err = {0};
    if (wr->ix->remote) return 1; /* its commit made the write visible */
    if (chimera_index_refresh(wr->ix->ix, NULL, &err) == CHIMERA_OK) return 1;
    pthread_mutex_lock(&wr->ix->srv->log_lock);
    fprintf(stderr, "chimera serve: %s: refresh after a commit failed: %s\n", wr->ix->name, err.msg);
    pthread_mutex_unlock(&wr->ix->srv->log_lock);
    return 0;
}

/* Merges adds[0..n) into one write (arrays concatenated; metadata joined). */
static int merge_adds(srv_write **adds, int n, uint32_t dim, srv_write *out)
{
    memset(out, 0, sizeof *out);
    out->kind = SRV_WRITE_ADD;
    size_t mlen = 0;
    for (int i = 0; i < n; i++) {
        out->n_docs += adds[i]->n_docs;
        out->n_tokens += adds[i]->n_tokens;
        if (adds[i]->metadata_jsonl) mlen += strlen(adds[i]->metadata_jsonl);
    }
    out->tokens = malloc((size_t)out->n_tokens * dim * sizeof *out->tokens);
    out->doclens = malloc((size_t)out->n_docs * sizeof *out->doclens);
    out->ids = malloc((size_t)out->n_docs * sizeof *out->ids);
    out->metadata_jsonl = mlen ? malloc(mlen + 1) : NULL;
    if (!out->tokens || !out->doclens || !out->ids || (mlen && !out->metadata_jsonl)) return -1;
    int64_t d = 0, t = 0;
    size_t mo = 0;
    for (int i = 0; i < n; i++) {
        const srv_write *w = adds[i];
        memcpy(out->tokens + (size_t)t * dim, w->tokens, (size_t)w->n_tokens * dim * sizeof *w->tokens);
        memcpy(out->doclens + d, w->doclens, (size_t)w->n_docs * sizeof *w->doclens);
        memcpy(out->ids + d, w->ids, (size_t)w->n_docs * sizeof *w->ids);
        if (w->metadata_jsonl) {
            size_t l = strlen(w->metadata_jsonl);
            memcpy(out->metadata_jsonl + mo, w->metadata_jsonl, l);
            mo += l;
        }
        d += w->n_docs;
        t += w->n_tokens;
    }
    if (out->metadata_jsonl) out->metadata_jsonl[mo] = '\0';
    return 0;
}

static void run_one(srv_writer *wr, srv_write *w)
{
    chimera_update_report rep;
    chimera_error err = {0};
    chimera_status s = commit(wr, w, &rep, &err);
    int vis = s == CHIMERA_OK ? refresh(wr) : 0;
    if (s == CHIMERA_OK) {
        atomic_fetch_add(&wr->m->docs_added, (uint64_t)rep.docs_added);
        atomic_fetch_add(&wr->m->docs_deleted, (uint64_t)rep.docs_deleted);
    }
    answer_write(wr, w, s, &rep, &err, 1, vis);
    srv_write_free(w);
}

static void run_adds(srv_writer *wr, srv_write **adds, int n)
{
    if (n == 1) {
        run_one(wr, adds[0]);
        return;
    }
    srv_write merged;
    chimera_update_report rep;
    chimera_error err = {0};
    chimera_status s = CHIMERA_ERR_NOMEM;
    if (merge_adds(adds, n, wr->ix->dim, &merged) == 0) s = commit(wr, &merged, &rep, &err);
    free(merged.tokens);
    free(merged.doclens);
    free(merged.ids);
    free(merged.metadata_jsonl);
    if (s != CHIMERA_OK) {
        for (int i = 0; i < n; i++) run_one(wr, adds[i]);
        return;
    }
    int vis = refresh(wr);
    atomic_fetch_add(&wr->m->docs_added, (uint64_t)rep.docs_added);
    for (int i = 0; i < n; i++) {
        answer_write(wr, adds[i], s, &rep, &err, n, vis);
        srv_write_free(adds[i]);
    }
}

static void *writer_main(void *arg)
{
    srv_writer *wr = arg;
    pthread_mutex_lock(&wr->mu);
    for (;;) {
        while (!wr->head && !wr->stop) {
            /* Idle: look for changes other processes committed (chimera add on the
             * command line, a rebuild) once a second, so searches see them too. A
             * refresh that finds nothing new reads the manifest and returns. */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += REFRESH_SECONDS;
            if (pthread_cond_timedwait(&wr->cv, &wr->mu, &ts) == ETIMEDOUT && !wr->head && !wr->stop) {
                pthread_mutex_unlock(&wr->mu);
                if (!wr->ix->remote) chimera_index_refresh(wr->ix->ix, NULL, NULL);
                pthread_mutex_lock(&wr->mu);
            }
        }
        if (!wr->head) break;
        /* take the first write, and if it is an add, the adds right behind it */
        srv_write *adds[GROUP_MAX_REQUESTS];
        int n = 0;
        int64_t tokens = 0;
        do {
            srv_write *w = wr->head;
            wr->head = w->next;
            if (!wr->head) wr->tail = NULL;
            w->next = NULL;
            adds[n++] = w;
            tokens += w->n_tokens;
        } while (adds[0]->kind == SRV_WRITE_ADD && wr->head && wr->head->kind == SRV_WRITE_ADD &&
                 n < GROUP_MAX_REQUESTS && tokens + wr->head->n_tokens <= GROUP_MAX_TOKENS);
        pthread_mutex_unlock(&wr->mu);
        if (adds[0]->kind == SRV_WRITE_ADD)
            run_adds(wr, adds, n);
        else
            run_one(wr, adds[0]);
        pthread_mutex_lock(&wr->mu);
    }
    pthread_mutex_unlock(&wr->mu);
    return NULL;
}

int srv_writer_start(srv_index *ix, srv_metrics *m, srv_writer **out, char *msg, size_t msg_len)
{
    srv_writer *wr = calloc(1, sizeof *wr);
    if (!wr) {
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    wr->ix = ix;
    wr->m = m;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&wr->mu, NULL);
    pthread_cond_init(&wr->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&wr->thread, NULL, writer_main, wr) != 0) {
        pthread_cond_destroy(&wr->cv);
        pthread_mutex_destroy(&wr->mu);
        free(wr);
        snprintf(msg, msg_len, "cannot start the writer thread");
        return -1;
    }
    *out = wr;
    return 0;
}

void srv_writer_submit(srv_writer *wr, srv_write *w)
{
    w->next = NULL;
    pthread_mutex_lock(&wr->mu);
    if (wr->stop) {
        /* a request whose body was still arriving when the drain ended */
        pthread_mutex_unlock(&wr->mu);
        srv_error e = {0};
        srv_fail(&e, 503, "SHUTTING_DOWN", "the server is shutting down; nothing was written");
        srv_answer_error(&w->pending->answer, &e);
        w->pending->done(w->pending);
        srv_write_free(w);
        return;
    }
    if (wr->tail)
        wr->tail->next = w;
    else
        wr->head = w;
    wr->tail = w;
    pthread_cond_signal(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
}

void srv_writer_stop(srv_writer *wr)
{
    if (!wr) return;
    pthread_mutex_lock(&wr->mu);
    int was = wr->stop;
    wr->stop = 1;
    pthread_cond_signal(&wr->cv);
    pthread_mutex_unlock(&wr->mu);
    if (!was) pthread_join(wr->thread, NULL);
}

void srv_writer_free(srv_writer *wr)
{
    if (!wr) return;
    srv_writer_stop(wr);
    pthread_cond_destroy(&wr->cv);
    pthread_mutex_destroy(&wr->mu);
    free(wr);
}
