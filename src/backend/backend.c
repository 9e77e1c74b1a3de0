/* Backend registry: the one place that tests CHIMERA_HAVE_CUDA (see backend.h). */
#include <stdio.h>

#include "backend/backend.h"

#ifdef CHIMERA_HAVE_CUDA
#include "backend/cuda/cuda_api.h"
#endif

int backend_cuda_compiled(void)
{
#ifdef CHIMERA_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int backend_cuda_device_count(char *status, size_t cap)
{
#ifdef CHIMERA_HAVE_CUDA
    return cuda_device_count(status, cap);
#else
    snprintf(status, cap, "CUDA backend not compiled in");
    return 0;
#endif
}
