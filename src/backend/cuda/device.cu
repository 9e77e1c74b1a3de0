// Device discovery for the CUDA backend. Runs on machines without a GPU or driver too:
// cudaGetDeviceCount then reports an error, which becomes the status text.
#include <cstdio>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_api.h"

extern "C" int cuda_device_count(char *status, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(status, cap, "no usable CUDA device: %s", cudaGetErrorString(e));
        cudaGetLastError(); // clear the sticky error state
        return 0;
    }
    if (n == 0) {
        snprintf(status, cap, "no CUDA device present");
        return 0;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        snprintf(status, cap, "%s (sm_%d%d, %.0f GiB)", prop.name, prop.major, prop.minor,
                 (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    else
        snprintf(status, cap, "%d CUDA device(s)", n);
    return n;
}
