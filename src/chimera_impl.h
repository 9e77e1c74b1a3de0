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

/* The pseudo-queries on which the build's calibration of corpus c (build seed seed)
 * checks its setting for k (10 or 100, where calibrated): the held-out part of its
 * sample (_INVALID_ARG for a k it does not calibrate). Where exact
 * search is the truth, the stored setting's mean Recall@k on them is the recall the
 * build reports (for tests). */
chimera_status chimera_calibration_heldout(const chimera_corpus *c, uint64_t seed, uint32_t k,
                                           chimera_queries **out, chimera_error *err);

#endif
