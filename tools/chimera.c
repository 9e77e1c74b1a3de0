/* chimera: the command-line front end. Uses only the public API (include/chimera.h). */
#include <stdio.h>
#include <string.h>

#include "chimera.h"

static int cmd_info_runtime(void)
{
    chimera_runtime_info ri;
    chimera_runtime_info_get(&ri);
    printf("chimera %s\n", chimera_version());
    printf("  simd          %s\n", ri.simd);
    printf("  blas core     %s\n", ri.blas_core);
    printf("  cpus          %d\n", ri.n_cpus);
    printf("  cuda          %s, %d device(s): %s\n", ri.cuda_compiled ? "compiled" : "not compiled",
           ri.n_cuda_devices, ri.cuda_status);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "version") == 0) return cmd_info_runtime();
    fprintf(stderr, "usage: chimera version\n");
    return 2;
}
