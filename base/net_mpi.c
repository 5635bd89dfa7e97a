// base/net_mpi.c: the Net of ./train_mpi over MPI (base/net_mpi.h). Every message goes
// over MPI_COMM_WORLD; a group's exchanges carry the group's tag, and MPI keeps the
// messages between two processes with one tag in order, so the collectives of one group
// pair up in the order both sides run them.
#include "base/net_mpi.h"
#include "base/net.h"
#include "base/paths.h"   // signals_note
#include "core/common.h"
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <mpi.h>

static Net mpi_net;

static int fits_int(size_t n) { return n <= (size_t)INT_MAX; }

static void mpi_exchange(int tag, int npeer, const int *peer, const void *const *tx, const size_t *txlen,
                         void *const *rx, const size_t *rxlen) {
    MPI_Request *req = malloc(sizeof(MPI_Request) * 2 * (size_t)npeer);
    MPI_Status *st = malloc(sizeof(MPI_Status) * 2 * (size_t)npeer);
    for (int i = 0; i < npeer; i++) {
        if (!fits_int(txlen[i]) || !fits_int(rxlen[i]))
            die("a collective between processes moves %zu bytes in one message, more than MPI's int count",
                MM_MAX(txlen[i], rxlen[i]));
        MPI_Irecv(rx[i], (int)rxlen[i], MPI_BYTE, peer[i], tag, MPI_COMM_WORLD, &req[i]);
    }
    for (int i = 0; i < npeer; i++)
        MPI_Isend(tx[i], (int)txlen[i], MPI_BYTE, peer[i], tag, MPI_COMM_WORLD, &req[npeer + i]);
    int rc = MPI_Waitall(2 * npeer, req, st);
    for (int i = 0; i < npeer; i++) {
        int got = -1;
        if (rc == MPI_SUCCESS) MPI_Get_count(&st[i], MPI_BYTE, &got);
        if (rc != MPI_SUCCESS || (size_t)got != rxlen[i])
            die("internal: a collective's message from process %d has %d bytes where %zu were expected", peer[i],
                got, rxlen[i]);
    }
    free(req);
    free(st);
}

static void mpi_gather(const void *mine, void *all, size_t bytes) {
    if (!fits_int(bytes)) die("internal: %zu bytes gathered from each process", bytes);
    MPI_Gather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

static void mpi_gatherv(const void *mine, size_t bytes, char **all, size_t *each) {
    int n = mpi_net.nprocess, root = mpi_net.process == 0;
    unsigned long long b = bytes, *sizes = root ? malloc(sizeof *sizes * (size_t)n) : NULL;
    MPI_Gather(&b, 1, MPI_UNSIGNED_LONG_LONG, sizes, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    int *counts = root ? malloc(sizeof(int) * (size_t)n) : NULL, *displs = root ? malloc(sizeof(int) * (size_t)n) : NULL;
    size_t total = 0;
    for (int p = 0; root && p < n; p++) {
        if (total + sizes[p] > (size_t)INT_MAX) die("%zu bytes gathered at process 0: more than MPI's int count", total);
        counts[p] = (int)sizes[p];
        displs[p] = (int)total;
        each[p] = sizes[p];
        total += sizes[p];
    }
    if (root && !(*all = malloc(total ? total : 1))) die("out of host memory for %zu gathered bytes", total);
    if (!fits_int(bytes)) die("%zu bytes to gather from one process: more than MPI's int count", bytes);
    MPI_Gatherv(mine, (int)bytes, MPI_BYTE, root ? *all : NULL, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(sizes); free(counts); free(displs);
}

static void mpi_share(void *buf, size_t bytes) {
    if (!fits_int(bytes)) die("internal: %zu bytes shared from process 0", bytes);
    MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

static void mpi_join(void *buf, size_t n) {
    uint32_t *w = (uint32_t *)buf;
    for (size_t at = 0; at < n;) {   // in parts that an int counts
        int k = (int)MM_MIN(n - at, (size_t)1 << 28);
        int rc = mpi_net.process == 0 ? MPI_Reduce(MPI_IN_PLACE, w + at, k, MPI_UINT32_T, MPI_BOR, 0, MPI_COMM_WORLD)
                                      : MPI_Reduce(w + at, NULL, k, MPI_UINT32_T, MPI_BOR, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) die("internal: joining a checkpoint image between processes failed (MPI error %d)", rc);
        at += (size_t)k;
    }
}

static void mpi_agree(int failed, const char *msg) {
    int mine = failed ? mpi_net.process : mpi_net.nprocess, first = 0;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == mpi_net.nprocess) return;
    fflush(stdout);
    if (first == mpi_net.process) fprintf(stderr, "%s\n", msg);
    // mpirun stops the others once one has ended with 1: quietly, the message is said.
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    MPI_Finalize();
    exit(1);
}

// die() in any process: its message is printed; then every process of the job ends.
static void mpi_end(int code) {
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static void mpi_finish(void) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
}

void net_mpi_start(int *argc, char ***argv) {
    int got;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &got);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_net.process);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_net.nprocess);
    MPI_Comm host;   // the processes that share this one's memory: those on its host
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi_net.process, MPI_INFO_NULL, &host);
    MPI_Comm_rank(host, &mpi_net.host_process);
    MPI_Comm_size(host, &mpi_net.host_nprocess);
    MPI_Comm_free(&host);
    mpi_net.exchange = mpi_exchange;
    mpi_net.gather = mpi_gather;
    mpi_net.join = mpi_join;
    mpi_net.share = mpi_share;
    mpi_net.gatherv = mpi_gatherv;
    mpi_net.agree = mpi_agree;
    if (mpi_net.nprocess > 1) {
        die_set_process(mpi_net.process, mpi_end);
        // mpirun stops every process with SIGTERM, for a signal given to it or for another
        // process that ended with an error (whose message is then the one to read)
        signals_note(" (from mpirun: a signal given to it, or another process that stopped with an error, which it names)");
    }
    if (got < MPI_THREAD_MULTIPLE)
        die("this MPI library gives thread level %d, and ./train_mpi needs MPI_THREAD_MULTIPLE (%d): the devices "
            "of a process are threads that exchange at once", got, MPI_THREAD_MULTIPLE);
    net_set(&mpi_net);
    atexit(mpi_finish);
}
