/* The CUDA translation units link into the library and the registry answers sensibly on
 * any machine: "cuda" gives a backend (a device is present), CHIMERA_ERR_DEVICE (compiled,
 * no usable device) or CHIMERA_ERR_UNSUPPORTED (not compiled); "auto" always gives one.
 * Runs everywhere, GPU or not. */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"

int main(void)
{
    char status[256];
    int n = backend_cuda_device_count(status, sizeof status);
    printf("cuda compiled: %d, devices: %d (%s)\n", backend_cuda_compiled(), n, status);
    chimera_error err = {0};
    cm_backend b;
    chimera_status s = backend_new("cuda", &b, &err);
    if (!backend_cuda_compiled()) CHECK(s == CHIMERA_ERR_UNSUPPORTED);
    else if (n == 0) CHECKF(s == CHIMERA_ERR_DEVICE, "%s", err.msg);
    else CHECKF(s == CHIMERA_OK, "%s", err.msg);
    if (s == CHIMERA_OK) {
        CHECK(strcmp(b.name, "cuda") == 0);
        CHECK(b.iface->api_version == BE_API_VERSION);
        CHECK(b.iface->host_centroid_scores == NULL);
        backend_free(&b);
    } else {
        CHECK(err.msg[0] != '\0');
    }
    CHECK_OK(backend_new("auto", &b, &err), &err);
    CHECK(strcmp(b.name, n > 0 && backend_cuda_compiled() ? "cuda" : "cpu") == 0);
    backend_free(&b);
    return check_report();
}
