/* C entry points of the CUDA backend (implemented in .cu files with C linkage). */
#ifndef CHIMERA_BACKEND_CUDA_API_H
#define CHIMERA_BACKEND_CUDA_API_H

#include <stddef.h>

#include "chimera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices the runtime can use; status gets the first one's name and
 * compute capability, or the runtime's reason for having none. Never fails hard: with
 * no driver or no GPU it returns 0. */
int cuda_device_count(char *status, size_t cap);

/* The CUDA implementation of the device interface (backend/backend.h). */
struct cm_backend;
chimera_status cuda_backend_new(struct cm_backend *out, chimera_error *err);

#ifdef __cplusplus
}
#endif

#endif
