// base/group.h: a group of devices as the collectives see it (base/collectives.c), and the
// part of a collective that crosses between processes (base/span.c). Private to those two.
//
// A group whose members all run in this process is the thread backend alone: members post
// pointers to their buffers in their slots, and read each other's through memory. A group
// that spans processes (MaxText's dcn axes, base/hybrid.c) does the same among the members
// here, and between the posting and the reading, the group's first member here (its
// leader) exchanges with each other process of the group the pieces of the posted buffers
// that the members there read, over the run's Net (base/net.h). A member then reads a
// remote member's piece from where it arrived: every member reads the same bytes as in one
// process and adds them in the same tree, so the bits are the one-process run's.
#ifndef MESHMOE_GROUP_H
#define MESHMOE_GROUP_H
#include "base/collectives.h"
#include <pthread.h>

struct Group {
    int n;
    int *members;                 // device ids, in rank order
    pthread_barrier_t barrier;    // every member (one process), else the members here
    const void **slot;            // (n) what each member posted
    const size_t **slot_off, **slot_bytes;   // (n) all-to-all layouts
    const size_t **slot_recv;     // (n) all-to-all: what each member expects from each
    const int *perm;              // ppermute's permutation
    const float **reduced;        // (n) the all-reduce: where each member's summed slice lies
    // Spanning processes (span is 0 otherwise):
    int span, tag;                // tag: the group's number, the same on every process
    int lead, nhere;              // the rank of the first member here; the members here
    int *process;                 // (n) the process of each member
    int npeer, *peer;             // the other processes of the group, ascending
    char **tx, **rx;              // (npeer) what goes to / comes from each, packed
    size_t *txcap, *rxcap;
    const char **piece;           // (n * n) piece[s * n + t]: where s's piece for t arrived
};

// Which bytes of its posted buffer member s sends to member t, per collective.
typedef enum { PIECE_NONE, PIECE_WHOLE, PIECE_SLICE_OF_T, PIECE_SPLIT_T, PIECE_SPLIT_S, PIECE_ALL_TO_ALL,
               PIECE_PERMUTE, PIECE_ROOT } PieceKind;
typedef struct {
    PieceKind kind;
    CollKind coll;                // what the bytes are counted under
    const void *const *posted;    // (n) the buffers of the members here
    size_t bytes;                 // WHOLE, SLICE_OF_T, PERMUTE, ROOT: bytes of a piece;
                                  // SPLIT_*: floats of the whole buffer
    int root;                     // ROOT: the member that sends
} Pieces;

void span_init(Group *g, const Mesh *mesh);
void span_free(Group *g);
// Leader only, once every member here has posted: the exchange; g->piece is then set for
// every remote s and every t here.
void span_exchange(Group *g, const Pieces *p);
// 1 if member q runs in another process.
static inline int span_remote(const Group *g, int q) { return g->span && g->process[q] != g->process[g->lead]; }
// The slice of n elements that rank r of P sums in an all-reduce: [n r / P, n (r+1) / P).
static inline size_t slice_at(size_t n, int r, int P) { return n * (size_t)r / (size_t)P; }

#endif
