/* chimera-mpi: the sharded commands (mpi.h). Run under mpirun; with one process it works
 * too (one shard). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi.h"
#include "../tools/cli.h"

/* chimera-mpi devices: which GPU each rank took (mpi_pick_device) and what the library
 * sees there, gathered and printed by rank 0, one line per rank. */
static int cmd_devices(void)
{
    char line[512], host[64] = "?";
    gethostname(host, sizeof host - 1);
    chimera_runtime_info ri;
    chimera_runtime_info_get(&ri);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(line, sizeof line, "rank %d on %s: CUDA_VISIBLE_DEVICES=%s, %d usable device%s (%s), "
             "kernels %s", mpi_world.rank, host, vis ? vis : "(unset)", ri.n_cuda_devices,
             ri.n_cuda_devices == 1 ? "" : "s", ri.cuda_status, ri.simd);
    char *all = mpi_world.rank == 0 ? malloc((size_t)mpi_world.size * sizeof line) : NULL;
    MPI_Request req;
    MPI_Igather(line, (int)sizeof line, MPI_CHAR, all, (int)sizeof line, MPI_CHAR, 0,
                MPI_COMM_WORLD, &req);
    mpi_wait(&req, "device report");
    for (int r = 0; all && r < mpi_world.size; r++) printf("%s\n", all + (size_t)r * sizeof line);
    free(all);
    return 0;
}

static void usage(void)
{
    if (mpi_world.rank != 0) return;
    fprintf(stderr,
            "usage: mpirun -n N chimera-mpi COMMAND [options]   (COMMAND --help for its options)\n"
            "  build    --tokens T.npy --doclens L.npy --out DIR: one shard per rank, one codebook\n"
            "  search   DIR --queries Q.npy [-k K] [--out run.trec]: broadcast, search, merge\n"
            "  serve    DIR [--port P]: the HTTP/JSON service of chimera serve, one shard per rank\n"
            "  devices  which GPU each rank took (its node-local rank modulo the node's GPUs)\n"
            "A sharded index is also built by `chimera build --shards N` and searched by "
            "`chimera search` (one process).\n");
}

int main(int argc, char **argv)
{
    cli_program = "chimera-mpi";
    /* one thread calls MPI at a time: the main thread, or in serve, the batcher or the
     * writer thread of rank 0 under one lock; the library's worker threads never do */
    int picked = mpi_pick_device(0);
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &mpi_world.threads);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_world.size);
    cli_quiet = mpi_world.rank != 0; /* rank 0 speaks for all */
    if (!picked) mpi_pick_device(1);
    cli_sigbus_guard();
    int rc = 2;
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "build") == 0) rc = mpi_cmd_build(argc, argv);
    else if (strcmp(cmd, "search") == 0) rc = mpi_cmd_search(argc, argv);
    else if (strcmp(cmd, "devices") == 0) rc = cmd_devices();
    else if (strcmp(cmd, "serve") == 0) {
#ifdef CHIMERA_HAVE_SERVER
        rc = mpi_cmd_serve(argc, argv);
#else
        if (mpi_world.rank == 0)
            fprintf(stderr, "chimera-mpi serve: built without the HTTP server: libmicrohttpd was "
                            "not found (apt-get install libmicrohttpd-dev, then rebuild)\n");
        rc = 1;
#endif
    }
    else if (strcmp(cmd, "--version") == 0) {
        if (mpi_world.rank == 0) printf("chimera-mpi %s\n", chimera_version());
        rc = 0;
    } else usage();
    fflush(stdout);
    MPI_Finalize();
    return rc;
}
