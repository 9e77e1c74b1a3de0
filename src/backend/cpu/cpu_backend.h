/* The CPU implementation of the device interface (see cpu_backend.c). */
#ifndef CHIMERA_BACKEND_CPU_BACKEND_H
#define CHIMERA_BACKEND_CPU_BACKEND_H

#include "backend/backend.h"

chimera_status cpu_backend_new(cm_backend *out, chimera_error *err);

#endif
