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

/* The truth the build's calibration of corpus c takes (chimera.c, calibrate_index; for
 * tests): a generous search's candidates, exact search for every pseudo-query, or,
 * where it calibrates k = 10 and 100, exact search for the k = 100 held-out queries
 * (the sample's [u, 3u), a third of it; half of k = 10's held-out ones) and the
 * candidates for the rest. */
typedef enum chimera_calibration_truth_kind {
    CAL_TRUTH_CANDIDATES = 0,
    CAL_TRUTH_EXACT = 1,
    CAL_TRUTH_EXACT_HELDOUT = 2,
} chimera_calibration_truth_kind;
chimera_calibration_truth_kind chimera_calibration_truth(const data_corpus *c);

/* The pseudo-queries on which the build's calibration of corpus c (build seed seed)
 * checks its setting for k (10 or 100, where calibrated): the held-out part of its
 * sample (_INVALID_ARG for a k it does not calibrate). Where exact search is their
 * truth (every k under CAL_TRUTH_EXACT, k = 100 under CAL_TRUTH_EXACT_HELDOUT), the
 * stored setting's mean Recall@k on them is the recall the build reports (for tests). */
chimera_status chimera_calibration_heldout(const chimera_corpus *c, uint64_t seed, uint32_t k,
                                           chimera_queries **out, chimera_error *err);

#endif
