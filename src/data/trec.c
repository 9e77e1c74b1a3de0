/* TREC run/qrels reading and writing (see trec.h). Files are read whole: a run of
 * 10^4 queries x 1000 hits is ~50 MB, well within memory, and whole-file parsing keeps
 * the error messages exact (file:line). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fileio.h"
#include "data/trec.h"
#include "core/alloc.h"

static int cmp_entry(const void *a, const void *b)
{
    const data_trec_entry *x = a, *y = b;
    int c = strcmp(x->qid, y->qid);
    if (c) return c;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return strcmp(x->doc, y->doc);
}

/* Splits a line into whitespace-separated fields in place; returns the count. */
static int split(char *line, char **f, int max)
{
    int n = 0;
    char *p = line;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\r') *p++ = '\0';
        if (!*p) break;
        if (n == max) return max + 1;
        f[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
    }
    return n;
}

chimera_status data_trec_read(const char *path, int is_qrels, data_trec_run *run,
                              chimera_error *err)
{
    memset(run, 0, sizeof *run);
    run->is_qrels = is_qrels;
    FILE *f = fopen(path, "rb");
    if (!f) return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    chimera_status s = CHIMERA_OK;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot read", path);
    }
    run->text = cm_malloc((size_t)size + 1);
    if (!run->text) {
        fclose(f);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    }
    if (fread(run->text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        data_trec_free(run);
        return cm_fail(err, CHIMERA_ERR_IO, "%s: cannot read", path);
    }
    fclose(f);
    run->text[size] = '\0';
    int64_t lines = 0;
    for (long i = 0; i < size; i++) lines += run->text[i] == '\n';
    run->e = cm_malloc((size_t)(lines + 1) * sizeof *run->e);
    if (!run->e) {
        data_trec_free(run);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    }
    char *p = run->text;
    int64_t lineno = 0;
    while (p && *p) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        lineno++;
        char *fld[7];
        int nf = split(p, fld, 6);
        p = nl ? nl + 1 : NULL;
        if (nf == 0) continue;
        int want = is_qrels ? 4 : 6;
        if (nf != want) {
            s = cm_fail(err, CHIMERA_ERR_FORMAT, "%s:%lld: expected %d fields (%s), found %d",
                        path, (long long)lineno, want,
                        is_qrels ? "qid iter docid relevance" : "qid Q0 docid rank score tag",
                        nf > 6 ? 7 : nf);
            break;
        }
        data_trec_entry *e = &run->e[run->n];
        char *end;
        e->qid = fld[0];
        e->doc = fld[2];
        errno = 0;
        e->rank = strtoll(is_qrels ? fld[3] : fld[3], &end, 10);
        if (errno || *end) {
            s = cm_fail(err, CHIMERA_ERR_FORMAT, "%s:%lld: %s '%s' is not an integer", path,
                        (long long)lineno, is_qrels ? "relevance" : "rank", fld[3]);
            break;
        }
        e->score = 0;
        if (!is_qrels) {
            e->score = strtod(fld[4], &end);
            if (*end || e->score != e->score) {
                s = cm_fail(err, CHIMERA_ERR_FORMAT, "%s:%lld: score '%s' is not a number",
                            path, (long long)lineno, fld[4]);
                break;
            }
        }
        run->n++;
    }
    if (s != CHIMERA_OK) {
        data_trec_free(run);
        return s;
    }
    qsort(run->e, (size_t)run->n, sizeof *run->e, cmp_entry);
    int64_t nq = 0;
    for (int64_t i = 0; i < run->n; i++)
        if (i == 0 || strcmp(run->e[i].qid, run->e[i - 1].qid) != 0) nq++;
    run->q_off = cm_malloc((size_t)(nq + 1) * sizeof *run->q_off);
    if (!run->q_off) {
        data_trec_free(run);
        return cm_fail(err, CHIMERA_ERR_NOMEM, "%s: out of memory", path);
    }
    run->n_q = 0;
    for (int64_t i = 0; i < run->n; i++)
        if (i == 0 || strcmp(run->e[i].qid, run->e[i - 1].qid) != 0) run->q_off[run->n_q++] = i;
    run->q_off[run->n_q] = run->n;
    return CHIMERA_OK;
}

void data_trec_free(data_trec_run *run)
{
    cm_free(run->text);
    cm_free(run->e);
    cm_free(run->q_off);
    memset(run, 0, sizeof *run);
}

int64_t data_trec_find(const data_trec_run *run, const char *qid)
{
    int64_t lo = 0, hi = run->n_q - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(run->e[run->q_off[mid]].qid, qid);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

chimera_status data_trec_write(const char *path, int64_t n_queries, uint32_t k, const int64_t *ids,
                               const float *scores, const char *tag, chimera_error *err)
{
    cm_writer w;
    CM_TRY(cm_writer_open(&w, path, err));
    chimera_status s = CHIMERA_OK;
    for (int64_t q = 0; q < n_queries && s == CHIMERA_OK; q++) {
        int64_t rank = 1;
        for (uint32_t r = 0; r < k && s == CHIMERA_OK; r++) {
            int64_t id = ids[q * k + r];
            if (id < 0) continue;
            s = cm_writer_printf(&w, err, "%lld Q0 %lld %lld %.6f %s\n", (long long)q,
                                 (long long)id, (long long)rank++, (double)scores[q * k + r],
                                 tag);
        }
    }
    if (s != CHIMERA_OK) {
        cm_writer_abort(&w);
        return s;
    }
    return cm_writer_commit(&w, err);
}
