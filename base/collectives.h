// base/collectives.h: collectives over a group of devices (base/mesh.h).
//
// Every call is made by all members of the group, like an MPI or XLA collective. Data
// really moves: each device copies what it receives from the other devices' buffers into
// a staging buffer of its own, allocated from its allocator under the tag `comm`, so the
// memory a collective needs is measured like any other. Bytes sent and received are
// counted per device and per kind of collective.
//
// Sums are done in the canonical order (docs/model.md#summation-order): the members' contributions
// are added along the fixed pairwise tree over ranks (base/treesum.h), whatever the mesh,
// so that a sum over 4 devices equals the sum of the two 2-device sums bit for bit.
//
// This is the whole interface a backend provides; the thread backend is in collectives.c.
// An MPI backend would implement the same functions with one process per device.
#ifndef MESHMOE_COLLECTIVES_H
#define MESHMOE_COLLECTIVES_H
#include <stddef.h>
#include "base/mesh.h"

typedef enum { COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_ALL_REDUCE, COLL_ALL_TO_ALL, COLL_PPERMUTE,
               COLL_BROADCAST, COLL_NKINDS } CollKind;
extern const char *const COLL_NAMES[COLL_NKINDS];

int group_size(const Group *g);
void coll_barrier(Group *g);
// recv (n * bytes_each) = the members' send buffers (bytes_each each), in rank order.
void coll_all_gather(Group *g, const void *send, void *recv, size_t bytes_each);
// recv (n_each floats) on rank r = tree sum over ranks of send[r*n_each .. (r+1)*n_each).
void coll_reduce_scatter(Group *g, const float *send, float *recv, size_t n_each);
// buf (n floats) = tree sum over ranks of every member's buf.
void coll_all_reduce(Group *g, float *buf, size_t n);
// The same with the staging buffer allocated for cap >= n floats per member: a size bound
// that does not depend on the data (the rows an expert received), so that the memory does not.
void coll_all_reduce_cap(Group *g, float *buf, size_t n, size_t cap);
// The all-reduce's first half, in place: slice r of rank r's buf (elements n*r/P ..
// n*(r+1)/P of P members) = the tree sum over ranks of that slice; the rest of its buf is
// left as it was (ZeRO-1's gradient: each rank needs the slice it updates).
void coll_reduce_scatter_inplace(Group *g, float *buf, size_t n);
// The same for integers and doubles (integer sums are exact; doubles use the tree).
void coll_all_reduce_long(Group *g, long *buf, size_t n);
void coll_all_reduce_double(Group *g, double *buf, size_t n);
// Variable all-to-all: rank r sends send_bytes[q] bytes from send + send_off[q] to rank q,
// and receives recv_bytes[q] bytes from rank q at recv + recv_off[q]. Sizes must agree.
void coll_all_to_all(Group *g, const void *send, const size_t *send_off, const size_t *send_bytes,
                     void *recv, const size_t *recv_off, const size_t *recv_bytes);
// Rank r sends `bytes` from send to rank perm[r] (perm[r] = -1: sends nothing); recv gets
// what arrives (or is left untouched if nobody sends to r).
void coll_ppermute(Group *g, const void *send, void *recv, size_t bytes, const int *perm);
// buf on every rank = buf of rank `root`.
void coll_broadcast(Group *g, void *buf, size_t bytes, int root);

// The sum of n contributions x[0..n) (each `len` floats, contiguous) along the canonical
// tree, left in x[0]. Used by the collectives and, with one device, by the model itself.
void tree_reduce_inplace(float *x, int n, size_t len);

#endif
