/* The public handles that more than one file of the API layer (src/chimera*.c) opens.
 * Private: front ends see only chimera.h. */
#ifndef CHIMERA_IMPL_H
#define CHIMERA_IMPL_H

#include "chimera.h"
#include "data/corpus.h"
#include "index/codebook.h"

struct chimera_corpus {
    data_corpus c;
    /* the files it was opened from (NULL when wrapping memory or slicing): a build
     * records them as the index's source (index/defaults.h) */
    char *src_tokens, *src_doclens, *src_ids;
};

struct chimera_codebook {
    ix_codebook cb;
};

/* Whether the build's calibration of a corpus of n_tokens tokens of dimension dim takes
 * exact search over the corpus as its truth (chimera.c, calibrate_index; for tests). */
int chimera_calibration_exact_truth(int64_t n_tokens, uint32_t dim);

#endif
