/* The CPU implementation of the device interface (see cpu_backend.c). */
#ifndef CHIMERA_BACKEND_CPU_BACKEND_H
#define CHIMERA_BACKEND_CPU_BACKEND_H

#include "backend/backend.h"

chimera_status cpu_backend_new(cm_backend *out, chimera_error *err);

/* The CPU backend as the search pipeline sees a device ("cpu-as-device"): the same
 * results of every call, but no host_centroid_scores, so the pipeline computes the
 * centroid scores its full-bit stage needs itself and rescores on a host thread a
 * worker, as with the CUDA backend. Tests and benchmarks run the pipeline's device path
 * on it without a GPU. */
chimera_status cpu_backend_new_as_device(cm_backend *out, chimera_error *err);

#endif
