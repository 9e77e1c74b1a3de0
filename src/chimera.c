/* The public API (include/chimera.h): argument checks at the boundary, handle structs,
 * and per-handle messages. Internal modules trust their inputs; this file is where
 * caller mistakes become statuses. */
#include <string.h>

#include "chimera.h"
#include "backend/backend.h"
#include "core/blas.h"
#include "core/cpu.h"

const char *chimera_status_str(chimera_status status)
{
    switch (status) {
    case CHIMERA_OK: return "CHIMERA_OK";
    case CHIMERA_ERR_INVALID_ARG: return "CHIMERA_ERR_INVALID_ARG";
    case CHIMERA_ERR_NOMEM: return "CHIMERA_ERR_NOMEM";
    case CHIMERA_ERR_IO: return "CHIMERA_ERR_IO";
    case CHIMERA_ERR_FORMAT: return "CHIMERA_ERR_FORMAT";
    case CHIMERA_ERR_CORRUPT: return "CHIMERA_ERR_CORRUPT";
    case CHIMERA_ERR_VERSION: return "CHIMERA_ERR_VERSION";
    case CHIMERA_ERR_DIM: return "CHIMERA_ERR_DIM";
    case CHIMERA_ERR_VALUE: return "CHIMERA_ERR_VALUE";
    case CHIMERA_ERR_EMPTY: return "CHIMERA_ERR_EMPTY";
    case CHIMERA_ERR_DEVICE: return "CHIMERA_ERR_DEVICE";
    case CHIMERA_ERR_UNSUPPORTED: return "CHIMERA_ERR_UNSUPPORTED";
    case CHIMERA_ERR_CANCELLED: return "CHIMERA_ERR_CANCELLED";
    case CHIMERA_ERR_INTERNAL: return "CHIMERA_ERR_INTERNAL";
    }
    return "CHIMERA_ERR_UNKNOWN";
}

const char *chimera_version(void) { return CHIMERA_VERSION_STRING; }

void chimera_runtime_info_get(chimera_runtime_info *info)
{
    memset(info, 0, sizeof *info);
    info->simd = cm_simd_level_name(cm_simd_level_get());
    info->blas_core = cm_blas_corename();
    info->blas_suggested_coretype = cm_blas_suggested_coretype();
    info->n_cpus = cm_cpu_count();
    info->cuda_compiled = backend_cuda_compiled();
    info->n_cuda_devices = backend_cuda_device_count(info->cuda_status, sizeof info->cuda_status);
}
