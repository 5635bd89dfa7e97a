// base/expert.h: expert parallelism, the exchange of routed tokens over the mesh axis
// `expert`.
//
// With ep devices along `expert`, device r holds experts [r*El, (r+1)*El), El = E/ep, and
// its own share of the batch (the batch is split over data, fsdp and expert). After
// routing, every device has its assignments sorted by expert (model/moe.c, build_rows), so
// the rows for each destination's experts are one contiguous block. One all-to-all sends
// each block to the device that owns those experts; it computes its experts on the rows it
// received, and a second all-to-all sends the results back, in the order they came. The
// backward pass does the same with the output gradients, and returns the input gradients.
//
// The order of the sums: an expert's weight gradient adds its rows leaf by leaf along the
// canonical tree (base/treesum.h). The owner lays out each expert's rows by source device
// and then by token, which is the global token order of the expert group (the expert axis
// is the fastest-varying batch axis, so the group holds consecutive sequences), so its
// leaves are those of one device holding the group's whole batch: the same bits.
#ifndef MESHMOE_EXPERT_H
#define MESHMOE_EXPERT_H
#include <stddef.h>
#include "base/collectives.h"

// Host data, but for from and to (the kernels' permutations) and the row buffers x, h0, h1.
typedef struct ExpertDispatch {
    Group *group;               // the devices along `expert` around this one
    int ep, rank;               // their number and this device's rank
    int El;                     // experts per device; this device's are rank*El .. rank*El+El-1
    int T;                      // tokens per device (the same on every device of the group)
    size_t *send_rows;          // (ep) rows this device sends to each rank
    size_t *send_first;         // (ep) the first of them, in this device's sorted rows
    size_t *recv_rows;          // (ep) rows received from each rank
    int *recv_count;            // (ep*El) rows from rank p for local expert e, at [p*El + e]
    int nrecv;                  // rows received in all
    int cap;                    // the most rows that can arrive, ep * T * min(K, El): what the
                                // receive buffers are allocated for, so that their size does not
                                // depend on the routing (MaxText's ragged all-to-all buffer is
                                // ep * B * S * K rows for the same reason)
    int *row_start;             // (El+1) expert-major layout: local expert e owns rows [row_start[e], row_start[e+1])
    int *from;                  // (nrecv) expert-major row -> its place in the receive buffer (device)
    int *to;                    // (nrecv) the inverse: place in the receive buffer -> expert-major row (device)
    int *row_token;             // (nrecv) the row's token numbered across the group: rank * T + token
    float *x, *h0, *h1;         // (nrecv,D), (nrecv,H), (nrecv,H): what the experts saw, kept for backward
} ExpertDispatch;

// The expert group's size for the calling device (1 without expert parallelism).
int ep_size(void);
int ep_rank(void);
// Plan the exchange for this device's sorted rows: row_start (E+1), row_token (the local
// token of each row), K experts per token. Exchanges the counts and the tokens (an all-to-all each).
ExpertDispatch *ep_plan(const int *row_start, const int *row_token, int E, int K, int T);
// Send: rows (this device's sorted rows, w floats each) -> out (nrecv, w) on the owners,
// expert-major.
void ep_send(ExpertDispatch *d, const float *rows, float *out, int w);
// Return: in (nrecv, w) expert-major on the owner -> rows (this device's sorted rows, w each).
void ep_return(ExpertDispatch *d, const float *in, float *rows, int w);
void ep_free(ExpertDispatch *d);

#endif
