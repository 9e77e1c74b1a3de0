/* chimera-mpi: a sharded index (tools/shards.h) built, searched and served by one MPI
 * process ("rank") per shard, on the public API only. The design is paper §3.3's:
 * every rank holds a disjoint shard of the posting lists
 * and codes, queries are broadcast, each rank generates, refines and scores candidates
 * on its own shard to a local top k, and rank 0 merges the lists; only query tokens,
 * ids and scores cross the network (docs/scaling.md).
 *
 * Failure. MPI does not survive a lost process: a rank that dies or stalls makes every
 * collective wait for it. So every wait here has a deadline (--timeout, default 60 s):
 * past it, the rank that notices says which operation did not complete and aborts the
 * whole job (MPI_Abort), which is how an operator learns of it; restarting means
 * starting the job again (mpirun), the index on disk being untouched by searches. Errors
 * a rank detects itself (a missing shard, a bad input) are agreed on by all ranks
 * (mpi_agree), so the job stops everywhere with one message, printed by rank 0. */
#ifndef CHIMERA_MPI_MPI_H
#define CHIMERA_MPI_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "chimera.h"

typedef struct mpi_ctx {
    int rank, size;
    int threads;          /* the thread support MPI provided (MPI_THREAD_*) */
    double timeout;       /* seconds a wait may take before the job is aborted */
    uint64_t bytes_sent;  /* payload this rank sent and received (counted by the helpers) */
    uint64_t bytes_recv;
} mpi_ctx;

extern mpi_ctx mpi_world;

/* Waits for req, or aborts the job once mpi_world.timeout passes (naming `what`). */
void mpi_wait(MPI_Request *req, const char *what);
/* Waits for req at most `seconds` (INFINITY: no limit; idle waits sleep between tests
 * instead of spinning a core). Returns 1 when it completed, 0 when the time ran out. */
int mpi_wait_for(MPI_Request *req, double seconds);

/* Every rank passes whether it succeeded (ok = 1) and, if not, its error. Returns 1 on
 * every rank when all succeeded; else 0 on every rank, with the first failing rank's
 * message printed once, by rank 0, as "chimera-mpi CMD: [rank R] message". */
int mpi_agree(const char *cmd, int ok, const chimera_error *err);

/* Broadcasts n bytes from rank 0 (in pieces below 2^31 bytes), with the deadline. */
void mpi_bcast_bytes(void *buf, size_t n, const char *what);

/* Chooses this rank's GPU before any CUDA call: the node-local rank modulo the node's
 * devices, exported as CUDA_VISIBLE_DEVICES unless the operator set one device already.
 * Called before MPI_Init (a CUDA-aware MPI may start CUDA inside it) with the local rank
 * the launcher exports (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID,
 * Slurm's SLURM_LOCALID): returns 1 when it found one; else call it again after
 * MPI_Init with after_init = 1, which asks MPI (a shared-memory split). */
int mpi_pick_device(int after_init);

int mpi_cmd_build(int argc, char **argv);
int mpi_cmd_search(int argc, char **argv);
int mpi_cmd_serve(int argc, char **argv);

#endif
