/* Backend registry: the one place that tests CHIMERA_HAVE_CUDA (see backend.h). */
#include <stdio.h>

#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

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

chimera_status backend_new(const char *name, cm_backend *out, chimera_error *err)
{
    memset(out, 0, sizeof *out);
    if (!name || strcmp(name, "auto") == 0) {
#ifdef CHIMERA_HAVE_CUDA
        char status[128];
        if (cuda_device_count(status, sizeof status) > 0) return cuda_backend_new(out, err);
#endif
        return cpu_backend_new(out, err);
    }
    if (strcmp(name, "cpu") == 0) return cpu_backend_new(out, err);
    /* internal (not among chimera.h's backends): the pipeline's device path on the CPU */
    if (strcmp(name, "cpu-as-device") == 0) return cpu_backend_new_as_device(out, err);
    if (strcmp(name, "cuda") == 0) {
#ifdef CHIMERA_HAVE_CUDA
        char status[128];
        if (cuda_device_count(status, sizeof status) == 0)
            return cm_fail(err, CHIMERA_ERR_DEVICE, "cuda backend: %s", status);
        return cuda_backend_new(out, err);
#else
        return cm_fail(err, CHIMERA_ERR_UNSUPPORTED,
                       "cuda backend: this library was built without CUDA (CHIMERA_CUDA=OFF or no nvcc)");
#endif
    }
    return cm_fail(err, CHIMERA_ERR_INVALID_ARG, "unknown backend '%s' (cpu, cuda or auto)", name);
}

void backend_free(cm_backend *b)
{
    if (b && b->iface && b->iface->release) b->iface->release(b->ctx);
    if (b) memset(b, 0, sizeof *b);
}
