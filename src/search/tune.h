/* Target-recall tuning: the paper's backward procedure (paper §3.2) automated over an
 * evaluation callback, so it is independent of how a search is run and measured. */
#ifndef CHIMERA_SEARCH_TUNE_H
#define CHIMERA_SEARCH_TUNE_H

#include "chimera.h"

/* Runs the search with `p` and measures recall and queries/s. */
typedef chimera_status (*sp_tune_eval_fn)(void *ctx, const chimera_search_params *p, double *recall,
                                          double *qps);

chimera_status sp_tune_backward(sp_tune_eval_fn eval, void *ctx, uint32_t k, double target,
                                uint32_t n_clusters, int64_t n_docs, chimera_tune_result *res);

#endif
