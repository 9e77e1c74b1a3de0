/* Synthetic multi-vector corpora that behave like contextual token embeddings (see
 * chimera_synth_write in chimera.h for the files written). The generator is exposed
 * in-memory too, for tests that need a corpus without touching the disk. */
#ifndef CHIMERA_DATA_SYNTH_H
#define CHIMERA_DATA_SYNTH_H

#include <stdint.h>

#include "chimera.h"

typedef struct data_synth_corpus {
    float *tokens;    /* n_tokens x dim */
    int64_t *doclens; /* n_docs */
    float *queries;   /* n_queries x query_len x dim */
    int64_t *target;  /* n_queries: the document each query was made from */
    int64_t n_tokens, n_docs, n_queries;
    uint32_t dim, query_len;
} data_synth_corpus;

/* Fills defaults into a copy of opts (zero fields -> documented defaults). */
chimera_synth_opts data_synth_defaults(const chimera_synth_opts *opts);

chimera_status data_synth_generate(const chimera_synth_opts *opts, data_synth_corpus *out,
                                   chimera_error *err);
void data_synth_free(data_synth_corpus *c);

chimera_status data_synth_write(const char *dir, const chimera_synth_opts *opts,
                                chimera_error *err);

#endif
