/* The device interface used by search/, and the registry of compiled-in backends.
 *
 * backend.c is the only file in the project that knows whether the CUDA backend was
 * compiled in (CHIMERA_HAVE_CUDA); everything else asks it. The stage vtable (upload of
 * resident data, centroid search, refinement, 1-bit document scoring) lands here with
 * the search pipeline; for now the registry reports which devices exist. */
#ifndef CHIMERA_BACKEND_BACKEND_H
#define CHIMERA_BACKEND_BACKEND_H

#include <stddef.h>

/* 1 when the CUDA backend was built into this library. */
int backend_cuda_compiled(void);

/* Number of usable CUDA devices; writes a one-line description into status (the
 * first device's name, or why none is usable: not compiled, no driver, no device). */
int backend_cuda_device_count(char *status, size_t cap);

#endif
