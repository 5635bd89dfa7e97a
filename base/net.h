// base/net.h: the processes of a run and the bytes that cross between them.
//
// One process holds one MaxText "slice" of the mesh: its devices are threads (base/mesh.h)
// and talk through memory. A run over several processes (./train_mpi under mpirun, one
// process per slice) also has a Net: the few operations the collectives need from a
// transport between processes. base/net_mpi.c implements them over MPI; ./train has no
// Net and is one process. A transport for device memory (a GPU) would stage its buffers
// through host memory and call the same operations.
#ifndef MESHMOE_NET_H
#define MESHMOE_NET_H
#include <stddef.h>

typedef struct Net {
    int process, nprocess;    // this process's number, and how many the run has
    // This process's number among the run's processes on its host, from 0, and how many
    // run there: a GPU backend shares out the host's GPUs among their devices.
    int host_process, host_nprocess;
    // A sparse exchange between this process and npeer others: tx[i] (txlen[i] bytes) goes
    // to process peer[i], and rx[i] receives exactly rxlen[i] bytes from it. `tag` tells
    // apart exchanges that run at once from several threads (one per group of devices).
    void (*exchange)(int tag, int npeer, const int *peer, const void *const *tx, const size_t *txlen,
                     void *const *rx, const size_t *rxlen);
    // Process 0 gets every process's `bytes` bytes, in process order, in all (others: NULL).
    void (*gather)(const void *mine, void *all, size_t bytes);
    // Process 0 gets every process's `bytes` bytes at mine, one after the other in process
    // order, in *all (malloc'd; the caller frees it) and each one's count in each (nprocess);
    // the others get nothing.
    void (*gatherv)(const void *mine, size_t bytes, char **all, size_t *each);
    // Every process's buf (bytes) becomes process 0's: a choice made once, for every process.
    void (*share)(void *buf, size_t bytes);
    // Process 0's buf (n 32-bit words) becomes the bitwise OR of every process's: images of
    // which each process wrote its own elements over zeros, joined bit for bit.
    void (*join)(void *buf, size_t n);
    // Every process says whether its start-up failed (msg: its die line); if one did, the
    // first that did prints msg and every process ends with code 1: an error that every
    // process finds alike (a config key) is said once, one that a single host finds (a file
    // missing there) by that host. Returns when none failed.
    void (*agree)(int failed, const char *msg);
} Net;

// The run's Net, or NULL for one process.
const Net *net_current(void);
void net_set(const Net *net);

#endif
