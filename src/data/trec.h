/* TREC run and qrels files.
 *
 * Run lines are `qid Q0 docid rank score tag`; qrels lines `qid iter docid relevance`.
 * In memory a file becomes entries sorted by (qid, rank) with ids kept as strings, so
 * runs of other systems (whose ids need not be numbers) compare like our own. */
#ifndef CHIMERA_DATA_TREC_H
#define CHIMERA_DATA_TREC_H

#include <stdint.h>

#include "chimera.h"

typedef struct data_trec_entry {
    const char *qid, *doc; /* point into the file's text (owned by the run) */
    int64_t rank;          /* rank for runs; relevance grade for qrels */
    double score;
} data_trec_entry;

typedef struct data_trec_run {
    char *text;            /* the file, NUL-separated tokens */
    data_trec_entry *e;    /* n entries sorted by qid, then rank, then score desc */
    int64_t n;
    int64_t *q_off;        /* n_q + 1 offsets into e, one run of entries per qid */
    int64_t n_q;
    int is_qrels;
} data_trec_run;

chimera_status data_trec_read(const char *path, int is_qrels, data_trec_run *run,
                              chimera_error *err);
void data_trec_free(data_trec_run *run);

/* Index of the query with this qid, or -1. */
int64_t data_trec_find(const data_trec_run *run, const char *qid);

/* Writes a run for n_queries x k results (ids -1 are skipped), atomically. */
chimera_status data_trec_write(const char *path, int64_t n_queries, uint32_t k, const int64_t *ids,
                               const float *scores, const char *tag, chimera_error *err);

#endif
