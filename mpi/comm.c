/* The MPI helpers of mpi.h: waits with a deadline, agreement on errors, broadcasts. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi.h"

mpi_ctx mpi_world = {.timeout = 60};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mpi_wait_for(MPI_Request *req, double seconds)
{
    /* Poll rather than block, so that a dead or stalled rank is noticed: spin for the
     * first millisecond (a search's round trip), then sleep between tests. */
    double t0 = now(), t = t0;
    int done = 0;
    for (;;) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return 1;
        t = now();
        if (t - t0 > seconds) return 0;
        if (t - t0 > 1e-3) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

void mpi_wait(MPI_Request *req, const char *what)
{
    if (mpi_wait_for(req, mpi_world.timeout)) return;
    fprintf(stderr, "chimera-mpi: rank %d: %s did not complete within %.0f s: a rank died or "
                    "stalls. MPI cannot continue without it, so the job stops here (restart "
                    "it with mpirun; the index on disk is unchanged)\n",
            mpi_world.rank, what, mpi_world.timeout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3); /* not reached */
}

int mpi_agree(const char *cmd, int ok, const chimera_error *err)
{
    /* the smallest failing rank, or size when none failed */
    int mine = ok ? mpi_world.size : mpi_world.rank, first = mpi_world.size;
    MPI_Request req;
    MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "agreement");
    if (first == mpi_world.size) return 1;
    char msg[sizeof err->msg];
    memset(msg, 0, sizeof msg);
    if (mpi_world.rank == first)
        snprintf(msg, sizeof msg, "%s", err && err->msg[0] ? err->msg
                                        : err ? chimera_status_str(err->code) : "failed");
    MPI_Ibcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD, &req);
    mpi_wait(&req, "error broadcast");
    if (mpi_world.rank == 0) {
        if (mpi_world.size > 1)
            fprintf(stderr, "chimera-mpi %s: [rank %d] %s\n", cmd, first, msg);
        else
            fprintf(stderr, "chimera-mpi %s: %s\n", cmd, msg);
    }
    return 0;
}

void mpi_bcast_bytes(void *buf, size_t n, const char *what)
{
    const size_t piece = (size_t)1 << 30;
    for (size_t off = 0; off < n || (n == 0 && off == 0); off += piece) {
        if (n == 0) break;
        size_t m = n - off < piece ? n - off : piece;
        MPI_Request req;
        MPI_Ibcast((char *)buf + off, (int)m, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        mpi_wait(&req, what);
        if (mpi_world.rank == 0) mpi_world.bytes_sent += m * (uint64_t)(mpi_world.size - 1);
        else mpi_world.bytes_recv += m;
    }
}

/* The number of NVIDIA devices of this node: /dev/nvidia0, /dev/nvidia1, ... (read
 * without initialising CUDA, which would fix the visible devices too early). */
static int count_devices(void)
{
    DIR *d = opendir("/dev");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !s[6]) continue;
        int digits = 1;
        for (const char *p = s + 6; *p; p++) digits &= *p >= '0' && *p <= '9';
        n += digits;
    }
    closedir(d);
    return n;
}

int mpi_pick_device(int after_init)
{
    int local = -1;
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
    for (int i = 0; i < 3 && local < 0; i++)
        if (getenv(vars[i])) local = atoi(getenv(vars[i]));
    if (local < 0) {
        if (!after_init) return 0;
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    char pick[64];
    if (vis && *vis) {
        /* a list the operator gave: this rank takes its entry (one device left alone) */
        int n = 1;
        for (const char *p = vis; *p; p++) n += *p == ',';
        if (n == 1) return 1;
        int want = local % n;
        const char *p = vis;
        for (int i = 0; i < want; i++) p = strchr(p, ',') + 1;
        size_t len = strcspn(p, ",");
        if (len >= sizeof pick) return 1;
        memcpy(pick, p, len);
        pick[len] = 0;
    } else {
        int n = count_devices();
        if (n == 0) return 1; /* no GPU here: the CPU backend */
        snprintf(pick, sizeof pick, "%d", local % n);
    }
    setenv("CUDA_VISIBLE_DEVICES", pick, 1);
    return 1;
}
