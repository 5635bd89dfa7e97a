// model/moe_experts.h: the routed experts' SwiGLU on their rows, forward and backward
// (docs/model.md#expert-dispatch), one expert per call or all of a device's experts in one
// (megablox=true: each product one grouped call, kernels/matmul.h). model/moe.c gathers the
// rows, sorts them by expert and calls these; under expert parallelism, on the rows that arrived.
#ifndef MESHMOE_MOE_EXPERTS_H
#define MESHMOE_MOE_EXPERTS_H
#include "base/config.h"
#include "base/context.h"   // Leaves
#include "model/params.h"
#include "model/dims.h"

// The experts a call runs, on consecutive rows: one (rows NULL, its n rows) or G at once
// (rows: G+1 host ints from 0, expert e0+g owning the rows [rows[g], rows[g+1]), n =
// rows[G]). cap >= n: the rows the call's temporaries are allocated for, the most that can
// arrive, so that the memory a step needs does not depend on the routing (the dry-run
// planner, which does not route, allocates exactly what a real step does).
typedef struct ExpertRows {
    const int *rows;
    int G, n, cap;
} ExpertRows;

// One expert's rows: n of them, temporaries for cap.
ExpertRows expert_rows_one(int n, int cap);

// Experts e0 .. e0+G-1 (their index in this device's share of the expert weights p):
// h0, h1 (n,H) = xs wi_0, xs wi_1 (kept);  y (n,D) = (silu(h0) * h1) wo, each row by its expert,
// rounded in bf16; y16: y as 16-bit numbers (model/precision.h: packed_round), else floats.
// y NULL: h0 and h1 only (a recomputation whose outputs remat kept).
void experts_forward(const Config *c, const LocalDims *ld, const MoeParams *p, int e0, ExpertRows er, const float *xs,
                     float *h0, float *h1, float *y, int y16);
// Given dye (n,D): g's experts += their weight gradients, leaf by leaf over the leaves of the
// tokens the rows are numbered in (rt (n): each row's token, on the host; the rows of an
// expert sorted by it); dxs (n,D) = the rows' input gradient (overwritten).
void experts_backward(const Config *c, const LocalDims *ld, const MoeParams *p, MoeParams *g, int e0, ExpertRows er,
                      const float *xs, const float *h0, const float *h1, const float *dye, const int *rt, Leaves leaf,
                      float *dxs);

#endif
