/* chimera-mpi: the sharded commands (mpi.h). Run under mpirun; with one process it works
 * too (one shard). */
#include <stdio.h>
#include <string.h>

#include "mpi.h"
#include "../tools/cli.h"

static void usage(void)
{
    if (mpi_world.rank != 0) return;
    fprintf(stderr,
            "usage: mpirun -n N chimera-mpi COMMAND [options]   (COMMAND --help for its options)\n"
            "  build    --tokens T.npy --doclens L.npy --out DIR: one shard per rank, one codebook\n"
            "  search   DIR --queries Q.npy [-k K] [--out run.trec]: broadcast, search, merge\n"
            "  serve    DIR [--port P]: the HTTP/JSON service of chimera serve, one shard per rank\n"
            "A sharded index is also built by `chimera build --shards N` and searched by "
            "`chimera search` (one process).\n");
}

int main(int argc, char **argv)
{
    cli_program = "chimera-mpi";
    /* one thread calls MPI at a time: the main thread, or in serve, the batcher or the
     * writer thread of rank 0 under one lock; the library's worker threads never do */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &mpi_world.threads);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_world.size);
    cli_quiet = mpi_world.rank != 0; /* rank 0 speaks for all */
    mpi_pick_device();
    cli_sigbus_guard();
    int rc = 2;
    const char *cmd = argc > 1 ? argv[1] : "";
    if (strcmp(cmd, "build") == 0) rc = mpi_cmd_build(argc, argv);
    else if (strcmp(cmd, "search") == 0) rc = mpi_cmd_search(argc, argv);
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
